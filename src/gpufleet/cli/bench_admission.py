"""CLI command: gpufleet bench admission."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("admission")(admission)


def admission(
    queues: Annotated[int, typer.Option(min=1, help="Leaf queues (organisations x teams x queues).")] = 1000,
    workloads: Annotated[int, typer.Option(min=0, help="Workloads submitted, beyond capacity.")] = 50_000,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes of 8 GPUs.")] = 5000,
    arrivals: Annotated[int, typer.Option(min=0, help="High-priority arrivals into the full fleet.")] = 1000,
    seed: Annotated[int, typer.Option()] = 0,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Placement policy of the (batch) workloads. Not given: the scheduler's default for batch."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Admission decisions per second and preemption latency on a quota tree over a synthetic fleet."""
    from gpufleet.api.errors import ValidationError
    from gpufleet.scheduler.placement.scoring import get_policy
    from gpufleet.sim.admission import run

    try:
        if policy is not None:
            get_policy(policy)  # an unknown name fails here, listing the valid ones
    except ValueError as exc:  # a policy that needs settings this benchmark cannot give (fgd's workload)
        raise ValidationError(f"policy {policy!r} cannot run here: {exc}", field="--policy") from exc
    result = run(queues=queues, workloads=workloads, nodes=nodes, arrivals=arrivals, seed=seed, policy=policy)
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    table = Table(title="Admission and preemption")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.to_dict().items():
        table.add_row(key, "n/a" if value is None else str(value))  # e.g. no arrival had to preempt
    Console().print(table)
