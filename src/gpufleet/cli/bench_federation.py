"""CLI command: gpufleet bench federation."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.output import print_figures


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("federation")(federation)


def federation(
    clusters: Annotated[int, typer.Option(min=1, help="Simulated worker clusters.")] = 10,
    nodes: Annotated[int, typer.Option(min=1, help="8-GPU nodes per worker cluster.")] = 2000,
    workloads: Annotated[int, typer.Option(min=0, help="Workloads dispatched, one at a time.")] = 20_000,
    queues: Annotated[int, typer.Option(min=1, help="Leaf queues sharing the fleet-wide quota.")] = 40,
    heartbeat_every: Annotated[
        int, typer.Option(min=1, help="Decisions between two workers' reports (each frees its work).")
    ] = 20,
    seed: Annotated[int, typer.Option()] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Dispatch latency (p99) and workloads dispatched per second over worker clusters' summaries
    (targets: p99 50 ms or less, 500/s or more)."""
    from gpufleet.federation.bench import run

    result = run(
        clusters=clusters,
        nodes=nodes,
        workloads=workloads,
        queues=queues,
        heartbeat_every=heartbeat_every,
        seed=seed,
    )
    print_figures("Federation dispatch", result, as_json=as_json)
