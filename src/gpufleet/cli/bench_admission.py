"""CLI command: gpufleet bench admission."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.output import print_figures


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
    from gpufleet.scheduler.placement.policies import get_policy
    from gpufleet.sim.admission import run

    try:
        if policy is not None:
            get_policy(policy)  # an unknown name fails here, listing the valid ones
    except ValueError as exc:  # a policy that needs settings this benchmark cannot give (fgd's workload)
        raise ValidationError(f"policy {policy!r} cannot run here: {exc}", field="--policy") from exc
    result = run(queues=queues, workloads=workloads, nodes=nodes, arrivals=arrivals, seed=seed, policy=policy)
    print_figures("Admission and preemption", result.to_dict(), as_json=as_json)
