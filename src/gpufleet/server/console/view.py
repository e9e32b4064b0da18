"""What the web console shows, computed from the stored objects: the fleet map, queues, work, cost.

Pure functions over the objects' JSON form (as the API answers them), so the view is the API's data
arranged for people, nothing more. The caller has already kept only what the token may read: a
queue's token gets no nodes, pods or pools, and so no map.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpufleet.api.accounting import job_records, service_records
from gpufleet.api.numerals import plain_digits
from gpufleet.api.reasons import pending_lines
from gpufleet.api.runtime import RACK_LABEL

Obj = Mapping[str, Any]
_DONE = ("Succeeded", "Failed")


def _spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _sharing_mode(sharing: Mapping[str, Any] | None) -> str:
    for key in ("mig", "timeSlicing", "mps"):
        if (sharing or {}).get(key):
            return key
    return ""


def natural(name: str) -> list[int | str]:
    """A sort key that puts `n-2` before `n-10`, as people number their nodes."""
    return [int(part) if plain_digits(part) else part for part in re.split(r"([0-9]+)", name)]


def _live(pods: Iterable[Obj]) -> Sequence[Obj]:
    return [p for p in pods if _status(p).get("phase") not in _DONE and _spec(p).get("nodeName")]


def gpu_cells(node: Obj, pods: Sequence[Obj]) -> list[dict[str, Any]]:
    """Each GPU of a node with its state: failed, mig, shared, allocated or idle, and who holds it.

    A GPU of a node that is not Ready counts as failed: nothing can run on it. A MIG GPU is `mig`
    whatever its instances hold (the holders say which are taken); a GPU held by pods asking for a
    fraction of it is `shared`.
    """
    spec, status = _spec(node), _status(node)
    unhealthy = {int(g.get("index", -1)): g for g in status.get("unhealthyGpus") or []}
    ready = status.get("phase") == "Ready"
    mig = _sharing_mode(spec.get("sharing")) == "mig"
    holders: dict[int, list[str]] = {}
    fractional: set[int] = set()
    for pod in pods:
        pspec = _spec(pod)
        held = [int(pspec["mig"]["gpu"])] if pspec.get("mig") else [int(g) for g in pspec.get("gpus") or []]
        for index in held:
            holders.setdefault(index, []).append(str(pspec.get("workload") or _name(pod)))
            if int(pspec.get("gpuMilli") or 1000) < 1000:
                fractional.add(index)
    cells = []
    for index in range(int(spec.get("gpus") or 0)):
        if index in unhealthy or not ready:
            state = "failed"
        elif mig:
            state = "mig"
        elif index in fractional:
            state = "shared"
        elif index in holders:
            state = "allocated"
        else:
            state = "idle"
        cell: dict[str, Any] = {
            "index": index,
            "state": state,
            "holders": sorted(set(holders.get(index, []))),
        }
        if index in unhealthy:
            cell["problem"] = str(unhealthy[index].get("message") or f"XID {unhealthy[index].get('xid')}")
        cells.append(cell)
    return cells


def fleet_map(pools: Sequence[Obj], nodes: Sequence[Obj], pods: Sequence[Obj]) -> list[dict[str, Any]]:
    """Pools, each with its racks, each with its nodes and their GPUs (nodes of no pool: pool `-`)."""
    by_node: dict[str, list[Obj]] = {}
    for pod in _live(pods):
        by_node.setdefault(str(_spec(pod)["nodeName"]), []).append(pod)
    pool_spec = {_name(p): _spec(p) for p in pools}
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in sorted(pool_spec)}
    for node in sorted(nodes, key=lambda n: natural(_name(n))):
        pool = str(_spec(node).get("pool") or "-")
        rack = str((node["metadata"].get("labels") or {}).get(RACK_LABEL) or "-")
        status = _status(node)
        grouped.setdefault(pool, {}).setdefault(rack, []).append(
            {
                "name": _name(node),
                "phase": status.get("phase") or "-",
                "cordoned": bool(_spec(node).get("unschedulable")),
                "gpus": gpu_cells(node, by_node.get(_name(node), [])),
            }
        )
    return [
        {
            "name": pool,
            "gpuModel": pool_spec.get(pool, {}).get("gpuModel") or "",
            "capacityType": pool_spec.get(pool, {}).get("capacityType") or "on-demand",
            "sharing": _sharing_mode(pool_spec.get(pool, {}).get("sharing")),
            "racks": [
                {"name": rack, "nodes": grouped[pool][rack]} for rack in sorted(grouped[pool], key=natural)
            ],
        }
        for pool in grouped
    ]


def queue_rows(queues: Sequence[Obj]) -> list[dict[str, Any]]:
    """Per queue: quotas against use per flavor, the fair-share weight, and its dominant share.

    The dominant share is the largest use/nominal over its flavors, divided by its weight: the figure
    the scheduler orders queues by (before historical usage, which the store does not keep).
    """
    rows = []
    for queue in sorted(queues, key=_name):
        spec, status = _spec(queue), _status(queue)
        usage = {str(f): float(v) for f, v in (status.get("usage") or {}).items()}
        weight = float(spec.get("fairShareWeight") or 1.0)
        flavors = []
        shares = []
        for flavor, quota in (spec.get("quotas") or {}).items():
            nominal = float(quota.get("nominal") or 0)
            borrowing = quota.get("borrowingLimit")
            used = usage.get(flavor, 0.0)
            if nominal > 0:
                shares.append(used / nominal)
            flavors.append(
                {
                    "flavor": flavor,
                    "nominal": nominal,
                    "borrowingLimit": None if borrowing is None else float(borrowing),
                    "used": used,
                }
            )
        rows.append(
            {
                "name": _name(queue),
                "parent": spec.get("parent"),
                "fairShareWeight": weight,
                "dominantShare": (max(shares) / weight) if shares and weight > 0 else 0.0,
                "pending": int(status.get("pendingWorkloads") or 0),
                "admitted": int(status.get("admittedWorkloads") or 0),
                "flavors": flavors,
            }
        )
    return rows


def work_rows(work: Sequence[Obj]) -> list[dict[str, Any]]:
    """Jobs and services, pending ones first, each pending one with its reason in describe's words."""
    rows = []
    for obj in work:
        spec, status = _spec(obj), _status(obj)
        row: dict[str, Any] = {
            "kind": obj.get("kind"),
            "namespace": obj["metadata"].get("namespace") or "",
            "name": _name(obj),
            "queue": spec.get("queue") or "default",
            "phase": status.get("phase") or "Pending",
            "restarts": int(status.get("restarts") or 0),
        }
        reason = status.get("pendingReason")
        if reason:
            kind, lines = pending_lines(reason)
            row["pending"] = {"type": kind, "lines": lines}
        rows.append(row)
    rows.sort(key=lambda r: (r["phase"] != "Pending", r["queue"], r["namespace"], r["name"]))
    return rows


def cost_rows(
    pools: Sequence[Obj], nodes: Sequence[Obj], pods: Sequence[Obj]
) -> dict[str, list[dict[str, Any]]]:
    """What GPUs cost now, per pool and per queue (the one whose quota a pod holds, its `spec.queue`),
    at the nodes' prices per GPU-hour; and the pools' idle GPU-hours and their cost so far, as the pool
    controller keeps them (`gpufleet cost`), None where the world keeps no such figure."""
    price = {_name(n): float(_spec(n).get("pricePerGPUHour") or 0) for n in nodes}
    per_queue: dict[str, list[float]] = {}
    for pod in _live(pods):
        pspec = _spec(pod)
        gpus = _pod_gpus(pspec)
        figures = per_queue.setdefault(str(pspec.get("queue") or "-"), [0.0, 0.0])
        figures[0] += gpus
        figures[1] += gpus * price.get(str(pspec.get("nodeName")), 0.0)
    pool_rows = []
    for pool in sorted(pools, key=_name):
        spec, status = _spec(pool), _status(pool)
        allocated = float(status.get("allocatedGpuMilli") or 0) / 1000
        each = float(spec.get("pricePerGPUHour") or 0)
        pool_rows.append(
            {
                "name": _name(pool),
                "pricePerGpuHour": each,
                "gpus": int(status.get("gpus") or 0),
                "allocatedGpus": allocated,
                "costPerHour": allocated * each,
                "idleGpuHours": _figure(status.get("idleGpuHours")),
                "idleCost": _figure(status.get("idleCost")),
            }
        )
    queue_rows_ = [
        {"name": name, "gpus": gpus, "costPerHour": money}
        for name, (gpus, money) in sorted(per_queue.items())
    ]
    return {"pools": pool_rows, "queues": queue_rows_}


def job_cost_rows(
    jobs: Sequence[Obj], pods: Sequence[Obj], nodes: Sequence[Obj], pools: Sequence[Obj], now: datetime
) -> list[dict[str, Any]]:
    """Each TrainingJob's GPUs, GPU-hours and cost so far, by the rule `gpufleet history` and
    `gpufleet cost` use (`gpufleet.api.accounting`); the most expensive first."""
    records = sorted(job_records(jobs, pods, nodes, pools, now), key=lambda r: (-r.cost, r.namespace, r.name))
    return [
        {
            "namespace": r.namespace,
            "name": r.name,
            "queue": r.queue,
            "state": r.state,
            "gpus": r.gpus,
            "pool": r.pool,
            "gpuHours": r.gpu_hours,
            "cost": r.cost,
            "lostGpuHours": r.lost_gpu_hours,
        }
        for r in records
    ]


def service_cost_rows(
    services: Sequence[Obj], pods: Sequence[Obj], nodes: Sequence[Obj], pools: Sequence[Obj], now: datetime
) -> list[dict[str, Any]]:
    """Each InferenceService's GPUs now, replica GPU-hours and cost so far, by the rule `gpufleet cost`
    uses (`gpufleet.api.accounting.service_records`); the most expensive first."""
    records = service_records(services, pods, nodes, pools, now)
    return [
        {
            "namespace": r.namespace,
            "name": r.name,
            "queue": r.queue,
            "state": r.state,
            "gpus": r.gpus,
            "pool": r.pool,
            "gpuHours": r.gpu_hours,
            "cost": r.cost,
        }
        for r in sorted(records, key=lambda r: (-r.cost, r.namespace, r.name))
    ]


def _pod_gpus(spec: Mapping[str, Any]) -> float:
    """A pod's GPUs: whole ones times its share of each, or a MIG instance's slices of seven."""
    mig = spec.get("mig")
    if mig:
        profile = str(mig.get("profile") or "")
        return int(profile[0]) / 7 if plain_digits(profile[:1]) else 0.0
    return len(spec.get("gpus") or []) * float(spec.get("gpuMilli") or 1000) / 1000


def _figure(value: Any) -> float | None:
    return None if value is None else float(value)
