"""What a TrainingJob's run costs: its GPUs, GPU-hours and money, one rule for every reader.

`gpufleet history` and `gpufleet cost` (the CLI) and the web console's cost page (the server) all
account jobs here, from the objects' JSON form (as the API answers them). A job's GPUs are its workers
times each one's GPUs (a share counts its fraction of a GPU, a MIG instance its compute slices of
seven); its GPU-hours are those GPUs times the time from its start to its end (or to `now`, while it
runs), restarts included; its cost is its GPU-hours at the price per GPU-hour of the nodes its pods are
on, or last ran on (else of a pool of its GPU model).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_MIG = re.compile(r"^([1-7])g\.")


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


def gpus_per_worker(worker: Mapping[str, Any]) -> float:
    """A worker's GPUs: whole ones, a share (`gpuMilli`), or a MIG instance's slices of seven."""
    if worker.get("gpus"):
        return float(worker["gpus"])
    if worker.get("gpuMilli"):
        return float(worker["gpuMilli"]) / 1000
    match = _MIG.match(str(worker.get("mig") or ""))
    return int(match.group(1)) / 7 if match else 0.0


def held_milli(*, gpus: int, gpu_milli: int, mig_profile: str | None) -> int:
    """The milli-GPUs a bound pod holds, as both worlds' pools count them: its GPUs times its share of
    each, or a MIG instance's compute slices of seven (seven `1g` instances make one GPU, not seven)."""
    if mig_profile:
        return round(gpus_per_worker({"mig": mig_profile}) * 1000)
    return gpus * gpu_milli


def job_records(
    jobs: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    pools: Iterable[Mapping[str, Any]],
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


@dataclass(frozen=True, slots=True)
class IdleAccount:
    """A pool's idle GPUs and what they have cost so far, brought up to one moment."""

    idle_gpu_hours: float
    idle_cost: float
    idle_gpus: float
    """GPUs ready but unallocated from now on: the rate the next call integrates."""


def idle_account(
    *,
    hours: float,
    idle_gpus: float,
    counted_at: float | None,
    now: float,
    ready_gpus: float,
    allocated_milli: int,
    price_per_gpu_hour: float,
) -> IdleAccount:
    """The one rule for a pool's idle GPU-hours, which both worlds keep in the GPUPool's status.

    `hours` and `idle_gpus` are what the status said at `counted_at` (None: never counted, nothing to
    add); the idle GPUs held steady since then, so the hours grow by them times the time passed. The
    integral is a step function, so each world calls this whenever the pool's ready GPUs or the GPUs
    its pods hold change (and now and then while nothing does), never between two changes."""
    since = now if counted_at is None else counted_at
    total = round(hours + idle_gpus * max(0.0, now - since) / 3600, 4)
    return IdleAccount(
        idle_gpu_hours=total,
        idle_cost=round(total * price_per_gpu_hour, 4),
        idle_gpus=round(max(0.0, ready_gpus - allocated_milli / 1000), 3),
    )
