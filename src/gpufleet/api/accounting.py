"""What a TrainingJob's run, an InferenceService's replicas and a pool's idle GPUs cost: one rule
for every reader.

`gpufleet history` and `gpufleet cost` (the CLI) and the web console's cost page (the server) all
account jobs here, from the objects' JSON form (as the API answers them). A job's GPUs are its workers
times each one's GPUs (a share counts its fraction of a GPU, a MIG instance its compute slices of
seven); its GPU-hours are those GPUs times the time from its start to its end (or to `now`, while it
runs), restarts included; its cost is its GPU-hours at the price per GPU-hour of the nodes its pods are
on, or last ran on (else of a pool of its GPU model).

An InferenceService's replica count changes as it scales, so its GPU-hours are an integral its status
keeps (`gpuHours` up to `gpuHoursCountedTime`, growing since by `placedGpus`), brought up to date by
`service_usage` whenever the controller of either world sees the count of placed replicas change;
`service_records` reads it up to now and prices it as a job's. A pool's idle GPU-hours are the same
kind of integral (`idle_account`), and `held_milli` is what a pod holds of its node's GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
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
    placed = _nodes_of(pods, "TrainingJob")
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
        price, pool = _price(on, node_by_name, pools, worker.get("gpuModel"), ran=started is not None)
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


def _nodes_of(pods: Iterable[Mapping[str, Any]], kind: str) -> dict[tuple[str, str], set[str]]:
    """(namespace, name) of each owner of this kind -> the nodes its pods are on."""
    placed: dict[tuple[str, str], set[str]] = {}
    for pod in pods:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        owner = spec.get("owner") or {}
        if owner.get("kind") == kind and spec.get("nodeName"):
            placed.setdefault((meta.get("namespace", ""), str(owner.get("name"))), set()).add(
                spec["nodeName"]
            )
    return placed


def _price(
    on: Sequence[str],
    node_by_name: Mapping[str, Mapping[str, Any]],
    pools: Sequence[Mapping[str, Any]],
    model: Any,
    *,
    ran: bool,
) -> tuple[float, str | None]:
    """(price per GPU-hour, pool) of work whose pods are on the nodes `on`: their mean price, else
    (no pod left to say where it ran, but it ran) the first pool of its GPU model."""
    prices = [float(node_by_name[n].get("pricePerGPUHour") or 0) for n in on if n in node_by_name]
    pool = next((node_by_name[n].get("pool") for n in on if n in node_by_name), None)
    if not prices:
        models = {model} if isinstance(model, str) else set(model or ())
        chosen = [p for p in pools if not models or (p.get("spec") or {}).get("gpuModel") in models]
        if chosen and ran:
            prices = [float((chosen[0].get("spec") or {}).get("pricePerGPUHour") or 0)]
            pool = pool or chosen[0]["metadata"]["name"]
    return (sum(prices) / len(prices) if prices else 0.0), pool


def accrue(hours: float, rate: float, counted_at: float | None, now: float) -> float:
    """An integral kept in a status: `hours` at `counted_at`, grown since at `rate` (GPUs) to `now`."""
    since = now if counted_at is None else counted_at
    return hours + rate * max(0.0, now - since) / 3600


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """One InferenceService's account: its replicas' GPU-hours so far, and their cost."""

    namespace: str
    name: str
    queue: str
    state: str
    gpus: float
    """GPUs its placed replicas hold now."""
    nodes: list[str]
    pool: str | None
    gpu_hours: float
    cost: float


def service_gpu_hours(status: Mapping[str, Any], now: datetime) -> float:
    """A service's GPU-hours up to `now`, from its status's integral (`gpuHours` at
    `gpuHoursCountedTime`, grown since by `placedGpus`): each replica counts from when the controller
    saw it placed until it saw it gone."""
    counted = _time(status.get("gpuHoursCountedTime"))
    hours = float(status.get("gpuHours") or 0.0)
    if counted is None:
        return hours
    rate = float(status.get("placedGpus") or 0.0)
    return accrue(hours, rate, counted.timestamp(), now.timestamp())


def service_records(
    services: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    pools: Iterable[Mapping[str, Any]],
    now: datetime,
) -> list[ServiceRecord]:
    """Every InferenceService's account, priced as a job's is (the nodes its replicas are on, else a
    pool of its GPU model)."""
    node_by_name = {n["metadata"]["name"]: n.get("spec") or {} for n in nodes}
    pools = list(pools)
    placed = _nodes_of(pods, "InferenceService")
    records = []
    for service in services:
        meta, spec, status = service["metadata"], service.get("spec") or {}, service.get("status") or {}
        key = (meta.get("namespace", ""), meta["name"])
        replica = spec.get("replica") or {}
        hours = service_gpu_hours(status, now)
        on = sorted(placed.get(key, ()))
        price, pool = _price(on, node_by_name, pools, replica.get("gpuModel"), ran=hours > 0)
        records.append(
            ServiceRecord(
                namespace=key[0],
                name=key[1],
                queue=str(spec.get("queue") or "default"),
                state=str(status.get("phase") or "Pending"),
                gpus=float(status.get("placedGpus") or 0.0),
                nodes=on,
                pool=pool,
                gpu_hours=hours,
                cost=hours * price,
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
    total = round(accrue(hours, idle_gpus, counted_at, now), 4)
    return IdleAccount(
        idle_gpu_hours=total,
        idle_cost=round(total * price_per_gpu_hour, 4),
        idle_gpus=round(max(0.0, ready_gpus - allocated_milli / 1000), 3),
    )


def service_usage(
    *,
    hours: float,
    placed_gpus: float,
    counted_at: float | None,
    now: float,
    replicas: int,
    per_replica: float,
) -> tuple[float, float]:
    """(gpuHours, placedGpus) of a service's status once `replicas` placed replicas of `per_replica`
    GPUs each are seen at `now`: the hours brought up to `now` at the rate held so far, and the new
    rate. The caller writes them, with `now` as `gpuHoursCountedTime`, only when the rate changes."""
    return round(accrue(hours, placed_gpus, counted_at, now), 6), round(replicas * per_replica, 6)
