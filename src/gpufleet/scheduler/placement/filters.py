"""Which nodes can hold one pod, computed for all nodes at once.

Each filter is a vectorised mask over node rows. A node is counted against the first filter that rejects
it, in the order below (the order kube-scheduler users read in "0/5 nodes are available: ..."), so the
counts of a NoFit reason add up to the number of nodes.

The filters split in two: static ones (node gone, cordon, taints, selector, node affinity, GPU model,
CUDA driver) change only when the fleet's generation changes, so their combined mask is cached per
request shape; capacity ones (CPU, memory, GPU) are recomputed per pod, over only the rows the caller
names. A filter a request does not ask for (no selector, no affinity, no GPU model, no CUDA version)
adds no step at all.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.fleet import cuda
from gpufleet.fleet.request import (
    GPU_MILLI,
    GpuKind,
    PodRequest,
    node_selector_matches,
    selector_matches,
    untolerated,
)
from gpufleet.fleet.state import DYNAMIC_CODE, SHARE_MODES, FleetState
from gpufleet.scheduler.placement.dra import partitions
from gpufleet.sharing import mig

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
Rows = npt.NDArray[np.intp] | slice

# Filter names, in evaluation order; they appear in NoFit reasons.
NODE_GONE = "NodeNotReady"
UNSCHEDULABLE = "NodeUnschedulable"
TAINTS = "TaintToleration"
NODE_SELECTOR = "NodeSelector"
NODE_AFFINITY = "NodeAffinity"
GPU_MODEL = "GpuModel"
CUDA_DRIVER = "CudaDriver"
CPU = "InsufficientCPU"
MEMORY = "InsufficientMemory"
GPU = "InsufficientGPU"
FILTER_ORDER = (
    NODE_GONE,
    UNSCHEDULABLE,
    TAINTS,
    NODE_SELECTOR,
    NODE_AFFINITY,
    GPU_MODEL,
    CUDA_DRIVER,
    CPU,
    MEMORY,
    GPU,
)

# Pods per node when a pod asks for nothing a node can run out of.
UNBOUNDED = 1 << 30


@dataclass(slots=True)
class FilterResult:
    """The feasible rows and, per filter, how many rows it rejected first."""

    feasible: BoolArray
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> npt.NDArray[np.intp]:
        return np.flatnonzero(self.feasible)


# ------------------------------------------------------------------ capacity


def share_fit(state: FleetState, request: PodRequest, rows: Rows) -> BoolArray:
    """Per row and GPU: could this share pod go on that GPU (enough free milli, a replica left)?"""
    return share_slots(state, request, rows) > 0


def share_slots(state: FleetState, request: PodRequest, rows: Rows) -> IntArray:
    """Per row and GPU: how many more pods of this share request the GPU could take."""
    free = np.where(state.gpu_ok[rows], state.gpu_free[rows], 0)
    slots = free // max(request.gpu_milli, 1)
    mode = state.mode[rows]
    limited = mode != DYNAMIC_CODE
    if np.any(limited):
        room = np.maximum(state.replicas[rows][:, None] - state.gpu_pods[rows], 0)
        slots = np.where(limited[:, None], np.minimum(slots, room), slots)
    slots[~SHARE_MODES[mode]] = 0
    return slots


def gpu_fit(state: FleetState, request: PodRequest, rows: Rows) -> BoolArray:
    """Per row: is there GPU capacity of the requested shape (ignoring CPU, memory and constraints)?"""
    kind = request.kind
    if kind is GpuKind.WHOLE:
        return state.whole_free[rows] >= request.gpus
    if kind is GpuKind.SHARE:
        return state.share_free[rows] >= request.gpu_milli
    if kind is GpuKind.MIG:
        assert request.mig is not None
        column = state.mig_profile_column(request.mig)
        # Nodes partitioning through claims: their claim allocator decides (placement.dra.partitions).
        dynamic = partitions.partitioned_by_claims(state, rows)
        if column is None:
            return dynamic
        return (state.mig_free[rows, column] > 0) | dynamic
    return np.ones(state.whole_free[rows].shape[0], dtype=np.bool_)


def pods_that_fit(state: FleetState, request: PodRequest, rows: Rows) -> IntArray:
    """Per row: how many more pods of this request the node could hold, counting capacity only.

    Exact for whole-GPU, MIG and share pods alone on a node; an upper bound when several pod shapes share
    the node. Used to rank topology domains, never to commit anything.
    """
    kind = request.kind
    if kind is GpuKind.WHOLE:
        fit = state.whole_free[rows] // request.gpus
    elif kind is GpuKind.SHARE:
        fit = share_slots(state, request, rows).sum(axis=1)
    elif kind is GpuKind.MIG:
        assert request.mig is not None
        column = state.mig_profile_column(request.mig)
        size = state.whole_free[rows].shape[0]
        fit = np.zeros(size, dtype=np.int64) if column is None else state.mig_free[rows, column].copy()
        fit = np.where(
            partitions.partitioned_by_claims(state, rows), partitions.most_instances(state, rows), fit
        )
    else:
        fit = np.full(state.whole_free[rows].shape[0], UNBOUNDED, dtype=np.int64)
    if request.cpu_milli:
        fit = np.minimum(fit, state.cpu_free[rows] // request.cpu_milli)
    if request.memory_mib:
        fit = np.minimum(fit, state.mem_free[rows] // request.memory_mib)
    return np.asarray(fit, dtype=np.int64)


def capacity_ok(state: FleetState, request: PodRequest, rows: Rows) -> BoolArray:
    """Per row: enough free CPU, memory and GPU of the requested shape for one more pod."""
    ok = gpu_fit(state, request, rows)
    if request.cpu_milli:
        ok = ok & (state.cpu_free[rows] >= request.cpu_milli)
    if request.memory_mib:
        ok = ok & (state.mem_free[rows] >= request.memory_mib)
    return ok


# -------------------------------------------------------------------- static


def _taint_ok(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp]) -> BoolArray:
    ok = np.ones(rows.size, dtype=np.bool_)
    for i in np.flatnonzero(state.tainted[rows]):
        if untolerated(state.taints[rows[i]], request.tolerations) is not None:
            ok[i] = False
    return ok


def _selector_ok(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp]) -> BoolArray:
    return np.array(
        [selector_matches(request.node_selector, state.specs[row].labels) for row in rows],
        dtype=np.bool_,
    )


def _affinity_ok(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp]) -> BoolArray:
    # Per node by name and labels, like the selector: required affinity is a static filter, so this runs
    # once per distinct request and fleet generation (static_mask's cache), not once per pod.
    affinity = request.node_affinity
    assert affinity is not None
    specs = state.specs
    return np.array(
        [node_selector_matches(affinity, specs[row].name, specs[row].labels) for row in rows],
        dtype=np.bool_,
    )


def _model_ok(state: FleetState, request: PodRequest, rows: Rows) -> BoolArray:
    # A model no node has is coded -1, the code of nodes without GPUs too: it must match nothing.
    codes = [code for code in (state.model_id(model) for model in request.gpu_models) if code >= 0]
    return np.isin(state.model[rows], np.array(codes, dtype=np.int64))


def _driver_ok(state: FleetState, request: PodRequest, rows: Rows) -> BoolArray:
    # An unknown driver (UNKNOWN, below every code) passes: docs/scheduling.md, decision 22.
    assert request.cuda_version is not None
    drivers = state.driver[rows]
    ok: BoolArray = (drivers == cuda.UNKNOWN) | (drivers >= cuda.minimum_code(request.cuda_version))
    return ok


def newest_driver(state: FleetState, rows: BoolArray) -> str | None:
    """The newest NVIDIA driver among the given rows, as the node reported it (None: none reported)."""
    if not rows.any():
        return None
    drivers = np.where(rows, state.driver[: rows.size], cuda.UNKNOWN)
    row = int(np.argmax(drivers))
    return state.specs[row].driver_version if drivers[row] != cuda.UNKNOWN else None


def cuda_note(state: FleetState, request: PodRequest, *, lead: str = "") -> str:
    """`CUDA 12.8 needs an NVIDIA driver >= ...; the newest driver in the fleet is 470.82.01`: what the
    pod's CUDA version asks of the driver and the newest driver of the nodes it could use otherwise
    (alive, of an accepted GPU model). The CudaDriver filter's part of a NoFit message; `lead` goes
    between the version and the requirement (`, which`)."""
    assert request.cuda_version is not None
    n = state.n_rows
    scope = state.alive[:n].copy()
    where = "in the fleet"
    if request.kind is not GpuKind.NONE and request.gpu_models:
        scope &= _model_ok(state, request, slice(0, n))
        where = f"on a node of model {', '.join(request.gpu_models)}"
    newest = newest_driver(state, scope)
    seen = f"the newest driver {where} is {newest}" if newest else f"no node {where} reports its driver"
    version = cuda.cuda_text(request.cuda_version)
    return f"CUDA {version}{lead} {cuda.requirement_text(request.cuda_version)}; {seen}"


def _static_steps(state: FleetState, request: PodRequest) -> list[tuple[str, BoolArray]]:
    n = state.n_rows
    sel = slice(0, n)
    steps: list[tuple[str, BoolArray]] = [
        (NODE_GONE, state.alive[sel].copy()),
        (UNSCHEDULABLE, state.schedulable[sel].copy()),
    ]
    mask = steps[0][1] & steps[1][1]
    tainted = np.flatnonzero(mask & state.tainted[sel])
    taint_mask = np.ones(n, dtype=np.bool_)
    if tainted.size:
        taint_mask[tainted] = _taint_ok(state, request, tainted)
    steps.append((TAINTS, taint_mask))
    selector_mask = np.ones(n, dtype=np.bool_)
    if request.node_selector:
        candidates = np.flatnonzero(mask)
        selector_mask[candidates] = _selector_ok(state, request, candidates)
    steps.append((NODE_SELECTOR, selector_mask))
    if request.node_affinity is not None:
        affinity_mask = np.ones(n, dtype=np.bool_)
        candidates = np.flatnonzero(mask)
        affinity_mask[candidates] = _affinity_ok(state, request, candidates)
        steps.append((NODE_AFFINITY, affinity_mask))
    if request.kind is not GpuKind.NONE and request.gpu_models:
        steps.append((GPU_MODEL, _model_ok(state, request, sel)))
    if request.cuda_version is not None:
        steps.append((CUDA_DRIVER, _driver_ok(state, request, sel)))
    return steps


_StaticKey = tuple[object, ...]
_static_cache: weakref.WeakKeyDictionary[FleetState, tuple[int, dict[_StaticKey, BoolArray]]] = (
    weakref.WeakKeyDictionary()
)
_never_cache: weakref.WeakKeyDictionary[FleetState, tuple[int, dict[PodRequest, str | None]]] = (
    weakref.WeakKeyDictionary()
)


def static_mask(state: FleetState, request: PodRequest) -> BoolArray:
    """Rows that pass every filter that does not depend on free capacity (cached per fleet generation).

    The returned array is shared: callers must not modify it.
    """
    key: _StaticKey = (
        request.tolerations,
        request.node_selector,
        request.affinity_key,
        request.gpu_models if request.kind is not GpuKind.NONE else (),
        request.cuda_version,
    )
    entry = _static_cache.get(state)
    if entry is None or entry[0] != state.generation:
        entry = (state.generation, {})
        _static_cache[state] = entry
    masks = entry[1]
    found = masks.get(key)
    if found is None:
        found = np.ones(state.n_rows, dtype=np.bool_)
        for _, step in _static_steps(state, request):
            found &= step
        found.setflags(write=False)
        masks[key] = found
    return found


def filter_nodes(state: FleetState, request: PodRequest, *, explain: bool = False) -> FilterResult:
    """All rows that can hold `request` now; with `explain`, also the rejection count per filter."""
    n = state.n_rows
    sel = slice(0, n)
    steps = _static_steps(state, request)
    steps.append((CPU, state.cpu_free[sel] >= request.cpu_milli))
    steps.append((MEMORY, state.mem_free[sel] >= request.memory_mib))
    if request.kind is not GpuKind.NONE:
        steps.append((GPU, gpu_fit(state, request, sel)))

    feasible = np.ones(n, dtype=np.bool_)
    rejected: dict[str, int] = {}
    for name, step in steps:
        if explain:
            newly = int(np.count_nonzero(feasible & ~step))
            if newly:
                rejected[name] = newly
        feasible &= step
    return FilterResult(feasible, rejected)


def never_fits(state: FleetState, request: PodRequest) -> str | None:
    """Why no node of the fleet could hold this pod even when empty, or None when one could.

    Such a request stays pending with this message; the scheduler never raises for it. The answer
    depends only on the nodes, so it is cached per fleet generation.
    """
    entry = _never_cache.get(state)
    if entry is None or entry[0] != state.generation:
        entry = (state.generation, {})
        _never_cache[state] = entry
    if request not in entry[1]:
        entry[1][request] = _never_fits(state, request)
    return entry[1][request]


def _never_fits(state: FleetState, request: PodRequest) -> str | None:
    n = state.n_rows
    live = state.alive[:n]
    if request.kind is not GpuKind.NONE and request.gpu_models:
        live = live & _model_ok(state, request, slice(0, n))
        if not live.any():
            return f"no node in the fleet has a GPU of model {', '.join(request.gpu_models)}"
    if request.cuda_version is not None and live.any():
        live = live & _driver_ok(state, request, slice(0, n))
        if not live.any():
            return f"is built for {cuda_note(state, request, lead=', which')}"
    kind = request.kind
    if kind is GpuKind.WHOLE:
        most = int(state.gpu_count[:n][live].max(initial=0))
        if most < request.gpus:
            return f"asks for {request.gpus} GPUs per pod; the largest node has {most}"
    if kind is GpuKind.MIG:
        assert request.mig is not None
        column = state.mig_profile_column(request.mig)
        models = sorted({state.models[m] for m in state.model[:n][live] if m >= 0})
        if not any(mig.find_profile(model, request.mig) for model in models):
            return (
                f"MIG profile {request.mig} is unknown for every GPU model in the fleet "
                f"({', '.join(models) or 'none'})"
            )
        if column is None and not partitions.partitioned_by_claims(state, slice(0, n))[live].any():
            return f"no node's MIG layout offers a {request.mig} instance"
    if kind is GpuKind.SHARE and request.gpu_milli > GPU_MILLI:
        return f"asks for {request.gpu_milli} milli-GPU of one GPU"
    if request.cpu_milli > int(state.cpu_cap[:n][live].max(initial=0)):
        return f"asks for {request.cpu_milli}m CPU per pod; no node has that much"
    if request.memory_mib > int(state.mem_cap[:n][live].max(initial=0)):
        return f"asks for {request.memory_mib}Mi memory per pod; no node has that much"
    return None
