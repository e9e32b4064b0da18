"""The fleet's GPUs per pool and model, as Prometheus gauges, from the scheduling core's view.

Both worlds' scheduling passes end in `queuestatus.reports`, which calls `record` here, so
`gpufleet_gpus{pool,model,state}` and `gpufleet_fragmented_gpus{pool,model}` say the same in both:

- `allocated`: healthy GPUs some pod holds (whole, a share, or a MIG instance of it);
- `idle`: healthy GPUs no pod holds;
- `unhealthy`: GPUs marked unhealthy (they hold nothing new);
- fragmented: allocated GPUs with room left that only a small request can use (a share of a GPU, or
  a free MIG instance beside a held one);
- `gpufleet_queue_pool_gpus{queue,pool}`: what each leaf queue's admitted workloads hold on each
  pool's nodes, a share as its milli-GPUs and a MIG instance as its compute slices out of 7.

A node's pool is its `gpufleet.io/pool` label (both worlds' pool controllers write it; "" for a node
of no pool). Cost: vectorised over the GPU arrays, plus a pass over MIG nodes' instances; the
node-to-group map is kept until the fleet's nodes change.
"""

from __future__ import annotations

import numpy as np

from gpufleet.api.labels import POOL_LABEL
from gpufleet.api.numerals import plain_digits
from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.state import Allocation, FleetState
from gpufleet.observability import metrics
from gpufleet.scheduler.cache import ClusterCache

MIG_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200): a `3g.40gb` instance is 3/7 of one."""

_groups_memo: dict[int, tuple[int, int, np.ndarray, list[tuple[str, str]], list[str]]] = {}


def _groups(fleet: FleetState) -> tuple[np.ndarray, list[tuple[str, str]], list[str]]:
    """Per row of the fleet, the index of its (pool, model) in the returned list, and its pool."""
    memo = _groups_memo.get(id(fleet))
    if memo is not None and memo[0] == fleet.generation and memo[1] == fleet.n_rows:
        return memo[2], memo[3], memo[4]
    keys: dict[tuple[str, str], int] = {}
    ids = np.zeros(fleet.n_rows, dtype=np.int64)
    pools: list[str] = []
    for row, spec in enumerate(fleet.specs[: fleet.n_rows]):
        key = (spec.labels.get(POOL_LABEL, ""), spec.gpu_model)
        ids[row] = keys.setdefault(key, len(keys))
        pools.append(key[0])
    _groups_memo.clear()  # one fleet per process is the rule; never hold on to an old one
    _groups_memo[id(fleet)] = (fleet.generation, fleet.n_rows, ids, list(keys), pools)
    return ids, list(keys), pools


def counts(fleet: FleetState) -> dict[tuple[str, str], dict[str, int]]:
    """Per (pool, model) of a node with GPUs: allocated, idle, unhealthy and fragmented GPUs."""
    n = fleet.n_rows
    if n == 0:
        return {}
    ids, keys, _pools = _groups(fleet)
    width = fleet.gpu_ok.shape[1]
    exists = np.arange(width)[None, :] < fleet.gpu_count[:n, None]
    ok = fleet.gpu_ok[:n] & exists
    held = fleet.gpu_pods[:n] > 0
    room = fleet.gpu_free[:n] > 0
    alive = fleet.alive[:n] & (fleet.gpu_count[:n] > 0)
    allocated = (ok & held).sum(axis=1)
    fragmented = (ok & held & room).sum(axis=1)
    for row in np.nonzero(alive)[0]:
        if fleet.specs[row].sharing is not SharingMode.MIG:
            continue
        instances = fleet.mig_instances(int(row))
        busy = [g for g, insts in instances.items() if ok[row, g] and any(h for _, _, h in insts)]
        allocated[row] = len(busy)
        fragmented[row] = sum(1 for g in busy if any(h is None for _, _, h in instances[g]))
    per_row = {
        "allocated": allocated,
        "idle": ok.sum(axis=1) - allocated,
        "unhealthy": (exists & ~fleet.gpu_ok[:n]).sum(axis=1),
        "fragmented": fragmented,
    }
    out: dict[tuple[str, str], dict[str, int]] = {}
    live = ids[alive]
    present = np.bincount(live, minlength=len(keys))
    for state, values in per_row.items():
        sums = np.bincount(live, weights=values[alive], minlength=len(keys))
        for index, key in enumerate(keys):
            if present[index]:
                out.setdefault(key, {})[state] = int(sums[index])
    return out


def gpus_of(alloc: Allocation) -> float:
    """How much of a GPU (or how many GPUs) one pod's allocation holds."""
    if alloc.mig is not None:
        slices = alloc.mig.profile.split("g.", 1)[0]
        return int(slices) / MIG_SLICES if plain_digits(slices) else 1.0
    return alloc.gpu_milli_total / 1000


def queue_pools(cache: ClusterCache) -> dict[tuple[str, str], float]:
    """Per (leaf queue, pool): the GPUs its admitted workloads hold there."""
    _ids, _keys, pools = _groups(cache.fleet)
    rows = len(pools)
    milli: dict[tuple[str, str], float] = {}
    for admitted in cache.admitted.values():
        queue = admitted.workload.queue
        for alloc in admitted.pods.values():
            if alloc.node >= rows:
                continue
            key = (queue, pools[alloc.node])
            held = alloc.milli * len(alloc.gpus) if alloc.mig is None else _mig_milli(alloc)
            milli[key] = milli.get(key, 0) + held
    return {key: round(value / 1000, 3) for key, value in milli.items() if value}


def _mig_milli(alloc: Allocation) -> float:
    return gpus_of(alloc) * 1000


def record(cache: ClusterCache) -> None:
    """Sets the GPU gauges to the fleet's current state."""
    fleet = cache.fleet
    gpus: dict[tuple[str, str, str], float] = {}
    fragmented: dict[tuple[str, str], float] = {}
    for (pool, model), by_state in counts(fleet).items():
        for state in ("allocated", "idle", "unhealthy"):
            gpus[(pool, model, state)] = by_state[state]
        fragmented[(pool, model)] = by_state["fragmented"]
    metrics.set_series(metrics.GPUS, gpus)
    metrics.set_series(metrics.FRAGMENTED_GPUS, fragmented)
    metrics.set_series(metrics.QUEUE_POOL_GPUS, queue_pools(cache))
