"""CLI command: gpufleet bench kube — pods bound per second on the cluster KUBECONFIG names."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli.output import print_figures


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("kube")(kube)


def kube(
    nodes: Annotated[int, typer.Option(min=1, help="Fake nodes of 8 GPUs.")] = 1000,
    pods: Annotated[int, typer.Option(min=1, help="Pods to bind.")] = 5000,
    gang_size: Annotated[int, typer.Option(min=1, help="Pods per gang (1: single pods).")] = 1,
    gpus_per_pod: Annotated[int, typer.Option(min=1, max=8, help="GPUs each pod asks for.")] = 1,
    scheduler: Annotated[
        str,
        typer.Option(help="schedulerName of the pods: gpufleet, or default-scheduler for kube-scheduler."),
    ] = "gpufleet",
    start_command: Annotated[
        str | None,
        typer.Option(
            help="Command that starts the scheduler once every pod is pending (e.g. kube-scheduler with "
            "its flags). Default for gpufleet: its own scheduler."
        ),
    ] = None,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream", help="The scheduler already runs: time from the first pod created to the last bind."
        ),
    ] = False,
    scheduler_args: Annotated[
        list[str], typer.Option("--scheduler-arg", help="Extra option for gpufleet's scheduler (repeatable).")
    ] = [],  # noqa: B006 - typer reads the default
    kubeconfig: Annotated[str | None, typer.Option(help="Kubeconfig file (default: KUBECONFIG).")] = None,
    scheduler_log: Annotated[
        str | None, typer.Option(help="Where the started scheduler's output goes.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the last bind.")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Pods bound per second on a real API server, gpufleet or kube-scheduler, same load and server."""
    from gpufleet.api.errors import ValidationError
    from gpufleet.kube.bench import KubeBench, gpufleet_scheduler_command
    from gpufleet.kube.bench import start_command as make_start
    from gpufleet.kube.client import KubeTransport

    config = kubeconfig or os.environ.get("KUBECONFIG")
    if not config:
        raise ValidationError("no cluster: give --kubeconfig or set KUBECONFIG", field="--kubeconfig")
    api = KubeTransport.from_environment(kubeconfig=config)
    try:
        run = KubeBench(
            api, nodes=nodes, pods=pods, gang_size=gang_size, gpus_per_pod=gpus_per_pod,
            scheduler_name=scheduler, metrics=api,
        )  # fmt: skip
    except ValueError as exc:
        raise ValidationError(str(exc), field="--pods") from exc
    if stream:
        start = None
    elif start_command:
        start = make_start(start_command, scheduler_log)
    elif scheduler == "default-scheduler":
        raise ValidationError(
            "kube-scheduler is not started by gpufleet: give --start-command, or --stream with it running",
            field="--start-command",
        )
    else:
        start = make_start(gpufleet_scheduler_command(config, scheduler, scheduler_args), scheduler_log)
    err = Console(stderr=True)
    result = run.measure(start=start, timeout=timeout, progress=lambda line: err.print(line, highlight=False))
    print_figures(f"Binding on a real API server: {scheduler}", result.to_dict(), as_json=as_json)
