"""Which GPUPools could serve a waiting workload, and how many fresh nodes of a pool it would fill.

The scheduling controller uses this to tell a workload that waits for nodes (it fits no node that
exists) from one that waits for quota or for a preemption, and writes the pools that could serve it
into `status.nodeDemand`, cheapest first. The pool controller reads only that signal: it never has to
interpret the scheduler's pending reasons.

A pool serves a workload when one fresh node of the pool holds at least one pod of every pod set
(GPU model, sharing mode, MIG profile, CPU and memory, a driver that runs the pod's CUDA version), the
workload's queue may use the pool's flavor, and a workload that must sit on one host (or one NVLink
domain) fits one node.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable

from gpufleet.api.pool import GPUPool, GPUPoolSpec
from gpufleet.api.quantity import cpu_milli, memory_mib
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import WorkloadPodSet, WorkloadSpec
from gpufleet.api.versions import parse_driver_version
from gpufleet.fleet import cuda
from gpufleet.sharing import mig

ONE_NODE_LEVELS = ("host", "nvlink")
"""Required topology levels no wider than one node."""


def pods_per_node(request: PodRequest, pool: GPUPoolSpec) -> int:
    """How many pods of `request` one fresh node of the pool holds (0: none)."""
    if request.gpu_models and pool.gpu_model not in request.gpu_models:
        return 0
    wanted = request.cuda
    driver = None if pool.driver_version is None else parse_driver_version(pool.driver_version)
    if wanted is not None and not cuda.supports(driver, wanted):
        return 0  # new nodes of a pool whose driver cannot run the pod would only stand idle
    mode = pool.sharing.mode
    # A dra pool's MIG GPUs are partitioned by claims (dynamic MIG): whole, or any instances that fit.
    dynamic = pool.dra and mode == "mig"
    fits: float = math.inf
    if request.gpus:
        if mode != "exclusive" and not dynamic:
            return 0
        fits = pool.gpus_per_node // request.gpus
    elif request.gpu_milli:
        if mode == "mig":
            return 0
        replicated = pool.sharing.time_slicing or pool.sharing.mps
        per_gpu = replicated.replicas if replicated else 1000 // request.gpu_milli
        fits = pool.gpus_per_node * per_gpu
    elif request.mig and dynamic:
        profile = mig.find_profile(pool.gpu_model, request.mig)
        layout = pool.sharing.mig or {}
        mig_gpus = sum(1 for gpu in range(pool.gpus_per_node) if str(gpu) in layout or "*" in layout)
        fits = 0 if profile is None else mig_gpus * profile.max_count
    elif request.mig:
        layout = pool.sharing.mig or {}
        fits = sum(
            (layout.get(str(gpu), layout.get("*")) or []).count(request.mig)
            for gpu in range(pool.gpus_per_node)
        )
    resources = pool.node_resources
    if request.cpu_milli and resources.cpu is not None:
        fits = min(fits, cpu_milli(resources.cpu) // request.cpu_milli)
    if request.memory_mib and resources.memory is not None:
        fits = min(fits, memory_mib(resources.memory) // request.memory_mib)
    return 0 if fits == math.inf else int(fits)


def nodes_for(pod_sets: Iterable[WorkloadPodSet], pool: GPUPoolSpec) -> int:
    """Fresh nodes of the pool that hold every pod of the pod sets (0: some pod fits no node)."""
    total = 0
    for pod_set in pod_sets:
        per_node = pods_per_node(pod_set.request, pool)
        if per_node <= 0:
            return 0
        total += math.ceil(pod_set.count / per_node)
    return total


def flavor_of(request: PodRequest, pool: GPUPoolSpec) -> str | None:
    """The quota flavor a pod of `request` is counted in on the pool (None: no GPU)."""
    if request.mig:
        return request.mig
    if request.gpus or request.gpu_milli:
        return pool.gpu_model
    return None


def serves(spec: WorkloadSpec, pool: GPUPoolSpec, *, flavors: Collection[str] | None) -> bool:
    """Whether fresh nodes of the pool could run the workload. `flavors`: what its queue may use
    (None: any, an unlimited queue)."""
    nodes = nodes_for(spec.pod_sets, pool)
    if nodes <= 0:
        return False
    if spec.topology.required in ONE_NODE_LEVELS and nodes > 1:
        return False
    if flavors is not None:
        for pod_set in spec.pod_sets:
            flavor = flavor_of(pod_set.request, pool)
            # A GPU model's quota covers every capacity type; `MODEL/spot` covers only spot pools.
            typed = None if pod_set.request.mig else f"{flavor}/{pool.capacity_type}"
            if flavor is not None and flavor not in flavors and typed not in flavors:
                return False
    return True


def serving_pools(
    spec: WorkloadSpec, pools: Iterable[GPUPool], *, flavors: Collection[str] | None
) -> list[str]:
    """The pools that could serve the workload, cheapest first (on-demand before spot at one price)."""
    found = [p for p in pools if serves(spec, p.spec, flavors=flavors)]
    found.sort(key=lambda p: (p.spec.price_per_gpu_hour, p.spec.capacity_type == "spot", p.name))
    return [p.name for p in found]
