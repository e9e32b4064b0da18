"""`gpufleet history` and `gpufleet cost`: what jobs ran and what they cost, as Slurm's `sacct` tells it.

Both read the objects the controllers keep, through the API; nothing more is recorded for them. Each
job's GPUs, GPU-hours and cost follow `gpufleet.api.accounting` (the web console's cost page uses the
same rule). `cost` adds the InferenceServices' replica GPU-hours and their cost (the integral of their
placed replicas their status keeps, `api.accounting.service_records`) to their queues and pools, and
lists them. Idle GPU-hours and their cost are the pools' own account (`status.idleGpuHours`,
`status.idleCost`), kept by the pool controller.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Annotated, Any

import typer

from gpufleet.api.accounting import JobRecord, ServiceRecord, job_records, service_records
from gpufleet.api.errors import ValidationError
from gpufleet.cli.client import Client
from gpufleet.cli.output import Columns, age, console, server_now

_FINISHED = ("Succeeded", "Failed")


def register(app: typer.Typer) -> None:
    app.command("history")(history)
    app.command("cost")(cost)


def duration(seconds: float | None) -> str:
    """`1d02:03:04`, `02:03:04`: sacct's elapsed time."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{days}d" if days else "") + f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _figure(value: float) -> str:
    return f"{value:.2f}"


def _gather(
    client: Client, namespace: str | None, *, services: bool = False
) -> tuple[list[JobRecord], list[dict[str, Any]], list[ServiceRecord]]:
    """Jobs' accounts, the pools, and (`services`) the InferenceServices' accounts."""

    def listed(kind: str, ns: str | None = None) -> list[dict[str, Any]]:
        return client.list_objects(client.resource_type(kind), ns) if client.has_kind(kind) else []

    jobs = listed("TrainingJob", namespace)
    pods, nodes, pools = listed("Pod", namespace), listed("Node"), listed("GPUPool")
    now = server_now()
    served = (
        service_records(listed("InferenceService", namespace), pods, nodes, pools, now) if services else []
    )
    return job_records(jobs, pods, nodes, pools, now), pools, served


Output = Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")]
Server = Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")]
Token = Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")]
State = Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")]


def history(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: all].")
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", metavar="QUEUE", help="One queue's jobs.")
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", "-a", help="Running and pending jobs too, not only finished ones.")
    ] = False,
    output: Output = "table",
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Job history and accounting, like sacct: state, GPUs, nodes, time queued and run, GPU-hours,
    cost, restarts and work lost."""
    from gpufleet.cli.control import connect

    if output not in ("table", "json"):
        raise ValidationError(f"must be one of table, json, got {output!r}", field="--output")
    records, _, _ = _gather(connect(server, token, state), namespace)
    chosen = [
        r for r in records if (everything or r.state in _FINISHED) and (queue is None or r.queue == queue)
    ]
    chosen.sort(key=lambda r: (r.submitted or "", r.namespace, r.name))
    if output == "json":
        items = [{_camel(key): value for key, value in asdict(r).items()} for r in chosen]
        sys.stdout.write(json.dumps({"items": items}, indent=2) + "\n")
        return
    if not chosen:
        console(stderr=True).print("No finished jobs." if not everything else "No jobs.")
        return
    table = Columns(
        "NAMESPACE",
        "NAME",
        "QUEUE",
        "STATE",
        "GPUS",
        "NODES",
        "SUBMITTED",
        "QUEUED",
        "ELAPSED",
        "GPU-HOURS",
        "COST",
        "RESTARTS",
        "LOST GPU-H",
        right=("GPUS", "QUEUED", "ELAPSED", "GPU-HOURS", "COST", "RESTARTS", "LOST GPU-H"),
        styles={"NAME": "cyan"},
    )
    for r in chosen:
        table.add_row(
            r.namespace,
            r.name,
            r.queue,
            r.state,
            f"{r.gpus:g}",
            ",".join(r.nodes) or "-",
            age(r.submitted),
            duration(r.queued_seconds),
            duration(r.elapsed_seconds),
            _figure(r.gpu_hours),
            _figure(r.cost),
            str(r.restarts),
            _figure(r.lost_gpu_hours),
        )
    console().print(table)


def cost(
    output: Output = "table",
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """GPU-hours and money per queue and per pool, with the pools' idle GPU-hours and their cost."""
    from gpufleet.cli.control import connect

    if output not in ("table", "json"):
        raise ValidationError(f"must be one of table, json, got {output!r}", field="--output")
    records, pools, services = _gather(connect(server, token, state), None, services=True)
    by_queue: dict[str, list[float]] = {}
    by_pool: dict[str, list[float]] = {p["metadata"]["name"]: [0.0, 0.0] for p in pools}
    for r in records:
        queue = by_queue.setdefault(r.queue, [0.0, 0.0, 0.0])
        queue[0] += r.gpu_hours
        queue[1] += r.cost
        queue[2] += r.lost_gpu_hours
        if r.pool is not None:
            pool = by_pool.setdefault(r.pool, [0.0, 0.0])
            pool[0] += r.gpu_hours
            pool[1] += r.cost
    for s in services:  # serving counts toward its queue and pool as training does (it loses no work)
        queue = by_queue.setdefault(s.queue, [0.0, 0.0, 0.0])
        queue[0] += s.gpu_hours
        queue[1] += s.cost
        if s.pool is not None:
            pool = by_pool.setdefault(s.pool, [0.0, 0.0])
            pool[0] += s.gpu_hours
            pool[1] += s.cost
    idle = {
        p["metadata"]["name"]: (
            float((p.get("status") or {}).get("idleGpuHours") or 0),
            float((p.get("status") or {}).get("idleCost") or 0),
        )
        for p in pools
    }
    if output == "json":
        answer = {
            "queues": {
                q: {"gpuHours": v[0], "cost": v[1], "lostGpuHours": v[2]} for q, v in by_queue.items()
            },
            "pools": {
                p: {
                    "gpuHours": v[0],
                    "cost": v[1],
                    "idleGpuHours": idle.get(p, (0, 0))[0],
                    "idleCost": idle.get(p, (0, 0))[1],
                }
                for p, v in by_pool.items()
            },
            "services": {
                f"{s.namespace}/{s.name}": {
                    "queue": s.queue,
                    "pool": s.pool,
                    "gpus": s.gpus,
                    "gpuHours": s.gpu_hours,
                    "cost": s.cost,
                }
                for s in services
            },
        }
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
        return
    queues = Columns(
        "QUEUE",
        "GPU-HOURS",
        "COST",
        "LOST GPU-H",
        title="Per queue",
        right=("GPU-HOURS", "COST", "LOST GPU-H"),
    )
    for name, (hours, money, lost) in sorted(by_queue.items()):
        queues.add_row(name, _figure(hours), _figure(money), _figure(lost))
    per_pool = Columns(
        "POOL",
        "GPU-HOURS",
        "COST",
        "IDLE GPU-H",
        "IDLE COST",
        title="Per pool",
        right=("GPU-HOURS", "COST", "IDLE GPU-H", "IDLE COST"),
    )
    for name, (hours, money) in sorted(by_pool.items()):
        idle_hours, idle_cost = idle.get(name, (0.0, 0.0))
        per_pool.add_row(name, _figure(hours), _figure(money), _figure(idle_hours), _figure(idle_cost))
    out = console()
    out.print(queues)
    out.print()
    out.print(per_pool)
    if services:
        per_service = Columns(
            "NAMESPACE",
            "NAME",
            "QUEUE",
            "GPUS",
            "GPU-HOURS",
            "COST",
            title="Per inference service",
            right=("GPUS", "GPU-HOURS", "COST"),
        )
        for s in sorted(services, key=lambda s: (-s.cost, s.namespace, s.name)):
            per_service.add_row(
                s.namespace, s.name, s.queue, _figure(s.gpus), _figure(s.gpu_hours), _figure(s.cost)
            )
        out.print()
        out.print(per_service)
