"""CLI command: gpufleet bench federation (dispatch speed; `--failover` and `--utilisation` on the twin)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.output import print_figures

WORKLOADS = {"dispatch": 20_000, "failover": 500, "utilisation": 400}
"""Each benchmark's full size when `--workloads` is not given."""


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("federation")(federation)


def federation(
    clusters: Annotated[
        int | None, typer.Option(min=1, help="Worker clusters (default 10; with --utilisation 3).")
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(min=1, help="8-GPU nodes per worker cluster (default 2,000; with --utilisation 16)."),
    ] = None,
    workloads: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Workloads: dispatched one at a time (default 20,000); with --failover those running in "
            "the lost cluster (500); with --utilisation the jobs of the stream (400).",
        ),
    ] = None,
    queues: Annotated[int, typer.Option(min=1, help="Leaf queues sharing the fleet-wide quota.")] = 40,
    heartbeat_every: Annotated[
        int, typer.Option(min=1, help="Decisions between two workers' reports (each frees its work).")
    ] = 20,
    failover: Annotated[
        bool,
        typer.Option(
            "--failover",
            help="On the twin: a worker cluster is cut off with its running TrainingJobs; time until all "
            "run again elsewhere, jobs run twice, work lost (targets: 60 s, 0, one checkpoint interval).",
        ),
    ] = False,
    utilisation: Annotated[
        bool,
        typer.Option(
            "--utilisation",
            help="On the twin: one job stream on --clusters clusters of --nodes under a manager and on "
            "one cluster of their size; mean GPU utilisation of each (target: within 2 points).",
        ),
    ] = False,
    load: Annotated[
        float, typer.Option(min=0.1, help="--utilisation: the stream's demand over the fleet's GPUs.")
    ] = 1.2,
    mean_seconds: Annotated[
        float, typer.Option(min=10, help="--utilisation: the jobs' mean run time (exponential).")
    ] = 180.0,
    run_seconds: Annotated[
        float, typer.Option(min=0, help="--failover: seconds the jobs run before the cluster is lost.")
    ] = 150.0,
    local_checkpoints: Annotated[
        bool,
        typer.Option(
            "--local-checkpoints",
            help="--failover: jobs checkpoint to their cluster only (no URI), not to a shared bucket.",
        ),
    ] = False,
    seed: Annotated[int, typer.Option()] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Dispatch latency (p99) and workloads dispatched per second over worker clusters' summaries
    (targets: p99 50 ms or less, 500/s or more); `--failover` measures a lost cluster on the twin."""
    if failover:
        from gpufleet.cli import fedbench_failover

        figures = fedbench_failover.run(
            workloads=WORKLOADS["failover"] if workloads is None else workloads,
            run_seconds=run_seconds,
            bucket=not local_checkpoints,
        )
        print_figures("Federation failover", figures, as_json=as_json)
        return
    if utilisation:
        from gpufleet.cli import fedbench_utilisation

        figures = fedbench_utilisation.run(
            clusters=3 if clusters is None else clusters,
            nodes=16 if nodes is None else nodes,
            jobs=WORKLOADS["utilisation"] if workloads is None else workloads,
            load=load,
            mean_seconds=mean_seconds,
            seed=seed,
        )
        print_figures("Federation utilisation", figures, as_json=as_json)
        return
    from gpufleet.federation.bench import run

    result = run(
        clusters=10 if clusters is None else clusters,
        nodes=2000 if nodes is None else nodes,
        workloads=WORKLOADS["dispatch"] if workloads is None else workloads,
        queues=queues,
        heartbeat_every=heartbeat_every,
        seed=seed,
    )
    print_figures("Federation dispatch", result, as_json=as_json)
