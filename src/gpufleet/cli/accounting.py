"""`gpufleet history` and `gpufleet cost`: what jobs ran and what they cost, as Slurm's `sacct` tells it.

Both read the objects the controllers keep, through the API; nothing more is recorded for them. A job's
GPUs are its workers times each one's GPUs (a share counts its fraction of a GPU, a MIG instance its
compute slices of seven); its GPU-hours are those GPUs times the time from its start to its end (or to
now, while it runs), restarts included; its cost is its GPU-hours at the price per GPU-hour of the
nodes its pods are on, or last ran on (else of a pool of its GPU model). Idle GPU-hours and their cost
are the pools' own account (`status.idleGpuHours`, `status.idleCost`), kept by the pool controller.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Annotated, Any

import typer

from gpufleet.api.errors import ValidationError
from gpufleet.cli.client import Client
from gpufleet.cli.output import Columns, age, console, server_now

_FINISHED = ("Succeeded", "Failed")
_MIG = re.compile(r"^([1-7])g\.")


def register(app: typer.Typer) -> None:
    app.command("history")(history)
    app.command("cost")(cost)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's account."""

    namespace: str
    name: str
    queue: str
    state: str
    gpus: float
    nodes: list[str]
    pool: str | None
    submitted: str | None
    queued_seconds: float | None
    elapsed_seconds: float
    gpu_hours: float
    cost: float
    restarts: int
    lost_gpu_hours: float


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def gpus_per_worker(worker: dict[str, Any]) -> float:
    """A worker's GPUs: whole ones, a share (`gpuMilli`), or a MIG instance's slices of seven."""
    if worker.get("gpus"):
        return float(worker["gpus"])
    if worker.get("gpuMilli"):
        return float(worker["gpuMilli"]) / 1000
    match = _MIG.match(str(worker.get("mig") or ""))
    return int(match.group(1)) / 7 if match else 0.0


def job_records(
    jobs: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    nodes: Iterable[dict[str, Any]],
    pools: Iterable[dict[str, Any]],
    now: datetime,
) -> list[JobRecord]:
    """Every job's account, from the jobs, their pods, the nodes and pools (for places and prices)."""
    node_by_name = {n["metadata"]["name"]: n.get("spec") or {} for n in nodes}
    pools = list(pools)
    placed: dict[tuple[str, str], set[str]] = {}
    for pod in pods:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        owner = spec.get("owner") or {}
        if owner.get("kind") == "TrainingJob" and spec.get("nodeName"):
            placed.setdefault((meta.get("namespace", ""), str(owner.get("name"))), set()).add(
                spec["nodeName"]
            )
    records = []
    for job in jobs:
        meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
        key = (meta.get("namespace", ""), meta["name"])
        worker = spec.get("worker") or {}
        gpus = gpus_per_worker(worker) * int(spec.get("replicas") or 0)
        created, admitted = _time(meta.get("creationTimestamp")), _time(status.get("admittedTime"))
        started, ended = _time(status.get("startTime")), _time(status.get("completionTime"))
        elapsed = max(0.0, ((ended or now) - started).total_seconds()) if started else 0.0
        on = sorted(placed.get(key, ()))
        prices = [float(node_by_name[n].get("pricePerGPUHour") or 0) for n in on if n in node_by_name]
        pool = next((node_by_name[n].get("pool") for n in on if n in node_by_name), None)
        if not prices:  # no pod left to say where it ran: a pool of its GPU model
            model = worker.get("gpuModel")
            models = {model} if isinstance(model, str) else set(model or ())
            chosen = [p for p in pools if not models or (p.get("spec") or {}).get("gpuModel") in models]
            if chosen and started:
                prices = [float((chosen[0].get("spec") or {}).get("pricePerGPUHour") or 0)]
                pool = pool or chosen[0]["metadata"]["name"]
        price = sum(prices) / len(prices) if prices else 0.0
        gpu_hours = gpus * elapsed / 3600
        records.append(
            JobRecord(
                namespace=key[0],
                name=key[1],
                queue=str(spec.get("queue") or "default"),
                state=str(status.get("phase") or "Pending"),
                gpus=gpus,
                nodes=on,
                pool=pool,
                submitted=meta.get("creationTimestamp"),
                queued_seconds=(admitted - created).total_seconds() if admitted and created else None,
                elapsed_seconds=elapsed,
                gpu_hours=gpu_hours,
                cost=gpu_hours * price,
                restarts=int(status.get("restarts") or 0),
                lost_gpu_hours=float(status.get("lostGpuSeconds") or 0) / 3600,
            )
        )
    return records


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


def _gather(client: Client, namespace: str | None) -> tuple[list[JobRecord], list[dict[str, Any]]]:
    def listed(kind: str, ns: str | None = None) -> list[dict[str, Any]]:
        return client.list_objects(client.resource_type(kind), ns) if client.has_kind(kind) else []

    jobs = listed("TrainingJob", namespace)
    pods, nodes, pools = listed("Pod", namespace), listed("Node"), listed("GPUPool")
    return job_records(jobs, pods, nodes, pools, server_now()), pools


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
    records, _ = _gather(connect(server, token, state), namespace)
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
    records, pools = _gather(connect(server, token, state), None)
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
