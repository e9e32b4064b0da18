"""GPUPools' idle GPU-hours and their cost in the Kubernetes world, kept by the operator.

The embedded pool controller integrates each pool's ready-but-unallocated GPUs over time into
`status.idleGpuHours` and prices them in `status.idleCost`; the operator keeps the same four fields
(`idleGpuHours`, `idleCost`, `idleGpus`, `idleCountedTime`) by the same rule,
`api.accounting.idle_account`, so `gpufleet cost`, the console and a pool's YAML say the same in both
worlds. The status is the integral's memory: a restarted (or newly elected) operator runs it on from
`idleCountedTime` with `idleGpus`, as the embedded controller does.

What it counts, from the operator's informers: a pool's GPUs on its Ready nodes (a node's pool and GPUs
read as the console reads them, `kube.console.console_node`), less what the pods bound there hold
(`kube.console.holding_pods`: the binder's note, else the pod's whole-GPU request), in milli-GPUs.

When: the operator brings every pool up to date in one pass whenever a bound pod, a node or a pool
changes (the idle GPUs are a step function: each step is counted from when it was seen), and every
`IDLE_PERIOD` seconds while nothing does and some pool has idle GPUs, so the hours run on in the
status. A pass that would change nothing but the hours by less than a hundredth writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from gpufleet.api.accounting import idle_account
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.console import console_node, held_milli, holding_pods
from gpufleet.kube.resources import resource_for
from gpufleet.kube.status import patch_status, stamp
from gpufleet.kube.transport import Json, Transport

IDLE_PERIOD = 60.0
"""Seconds between two passes while no pod, node or pool changes (the embedded STATUS_PERIOD)."""


def pool_holdings(
    pools: Sequence[Json], raw_nodes: Sequence[Json], raw_pods: Sequence[Json], config: KubeConfig
) -> dict[str, tuple[int, int]]:
    """Per pool: the GPUs of its Ready nodes and the milli-GPUs the pods bound there hold."""
    nodes = [
        made
        for raw in raw_nodes
        if (made := console_node(raw, pools, config)) is not None
        and made["spec"]["pool"]
        and made["status"]["phase"] == "Ready"
    ]
    out = {str(p["metadata"]["name"]): (0, 0) for p in pools}
    pool_of_node = {n["metadata"]["name"]: n["spec"]["pool"] for n in nodes}
    for node in nodes:
        gpus, milli = out.get(node["spec"]["pool"], (0, 0))
        out[node["spec"]["pool"]] = (gpus + int(node["spec"]["gpus"]), milli)
    for pod in holding_pods(raw_pods, nodes, config):
        pool = pool_of_node[pod["spec"]["nodeName"]]
        gpus, milli = out[pool]
        out[pool] = (gpus, milli + held_milli(pod["spec"]))
    return out


def idle_update(pool: Json, *, ready_gpus: int, allocated_milli: int, now: float) -> Json:
    """The idle fields of the pool's status brought up to `now`, by `api.accounting.idle_account`;
    {} where nothing but the hours moved, and by less than a hundredth."""
    status = pool.get("status") or {}
    spec = pool.get("spec") or {}
    # The status keeps whole seconds (`stamp`): count up to the second written, so no time is lost.
    now = float(math.floor(now))
    counted = status.get("idleCountedTime")
    account = idle_account(
        hours=float(status.get("idleGpuHours") or 0.0),
        idle_gpus=float(status.get("idleGpus") or 0.0),
        counted_at=datetime.fromisoformat(str(counted).replace("Z", "+00:00")).timestamp()
        if counted
        else None,
        now=now,
        ready_gpus=ready_gpus,
        allocated_milli=allocated_milli,
        price_per_gpu_hour=float(spec.get("pricePerGPUHour") or 0.0),
    )
    moved = round(account.idle_gpu_hours, 2) != round(float(status.get("idleGpuHours") or 0.0), 2)
    if counted and not moved and account.idle_gpus == float(status.get("idleGpus") or 0.0):
        return {}
    return {
        "idleGpuHours": account.idle_gpu_hours,
        "idleCost": account.idle_cost,
        "idleGpus": account.idle_gpus,
        "idleCountedTime": stamp(now),
    }


def account_pools(
    api: Transport,
    pools: Sequence[Json],
    raw_nodes: Sequence[Json],
    raw_pods: Sequence[Json],
    config: KubeConfig,
    *,
    now: float,
    written: dict[str, tuple[str, Json]],
) -> bool:
    """One pass: every pool's idle fields written where they changed; whether some pool has idle GPUs
    (its hours run on, so a later pass is due even if nothing changes). `written` is the caller's memory
    of its last write per pool (the resourceVersion it was made on, the fields): a pool whose copy is
    still that version has not shown the write yet, and is counted on from what was written, not from
    the older status (which would count the time since then at the old rate)."""
    holdings = pool_holdings(pools, raw_nodes, raw_pods, config)
    resource = resource_for("GPUPool")
    moving = False
    for pool in pools:
        name = str(pool["metadata"]["name"])
        version = str(pool["metadata"].get("resourceVersion"))
        memo = written.get(name)
        if memo is not None and memo[0] == version:
            pool = dict(pool, status={**(pool.get("status") or {}), **memo[1]})
        gpus, milli = holdings[name]
        update = idle_update(pool, ready_gpus=gpus, allocated_milli=milli, now=now)
        if update and patch_status(api, resource, pool, update):
            written[name] = (version, update)
        moving = moving or float({**(pool.get("status") or {}), **update}.get("idleGpus") or 0.0) > 0
    for gone in written.keys() - {str(p["metadata"]["name"]) for p in pools}:
        del written[gone]
    return moving
