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
