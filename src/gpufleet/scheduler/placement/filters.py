"""Which nodes can hold one pod, computed for all nodes at once.

Each filter is a vectorised mask over node rows. A node is counted against the first filter that rejects
it, in the order below (the order kube-scheduler users read in "0/5 nodes are available: ..."), so the
counts of a NoFit reason add up to the number of nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.request import GpuKind, PodRequest
from gpufleet.fleet.state import MODE_CODES, FleetState

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# Filter names, in evaluation order; they appear in NoFit reasons.
NODE_GONE = "NodeNotReady"
UNSCHEDULABLE = "NodeUnschedulable"
TAINTS = "TaintToleration"
NODE_SELECTOR = "NodeSelector"
GPU_MODEL = "GpuModel"
CPU = "InsufficientCPU"
MEMORY = "InsufficientMemory"
GPU = "InsufficientGPU"
FILTER_ORDER = (NODE_GONE, UNSCHEDULABLE, TAINTS, NODE_SELECTOR, GPU_MODEL, CPU, MEMORY, GPU)

_DYNAMIC = MODE_CODES[SharingMode.DYNAMIC]
_SHARE_CODES = np.array(
    [MODE_CODES[m] for m in (SharingMode.DYNAMIC, SharingMode.TIME_SLICING, SharingMode.MPS)]
)


@dataclass(slots=True)
class FilterResult:
    """The feasible rows and, per filter, how many rows it rejected first."""

    feasible: BoolArray
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> npt.NDArray[np.intp]:
        return np.flatnonzero(self.feasible)


def share_fit(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp] | slice) -> BoolArray:
    """Per row and GPU: could this share pod go on that GPU (enough free milli, a replica left)?"""
    free = np.where(state.gpu_ok[rows], state.gpu_free[rows], 0)
    fits = free >= request.gpu_milli
    mode = state.mode[rows]
    limited = mode != _DYNAMIC
    if np.any(limited):
        room = state.gpu_pods[rows] < state.replicas[rows][:, None]
        fits &= room | ~limited[:, None]
    fits &= np.isin(mode, _SHARE_CODES)[:, None]
    return fits


def gpu_fit(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp] | slice) -> BoolArray:
    """Per row: is there GPU capacity of the requested shape (ignoring CPU, memory and constraints)?"""
    kind = request.kind
    if kind is GpuKind.WHOLE:
        return state.whole_free[rows] >= request.gpus
    if kind is GpuKind.SHARE:
        return np.asarray(share_fit(state, request, rows).any(axis=1), dtype=np.bool_)
    if kind is GpuKind.MIG:
        assert request.mig is not None
        column = state.mig_profile_column(request.mig)
        if column is None:
            count = state.whole_free[rows].shape[0]
            return np.zeros(count, dtype=np.bool_)
        return state.mig_free[rows, column] > 0
    return np.ones(state.whole_free[rows].shape[0], dtype=np.bool_)


def _taint_ok(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp]) -> BoolArray:
    ok = np.ones(rows.size, dtype=np.bool_)
    for i, row in enumerate(rows):
        for taint in state.taints[row]:
            if taint.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tol.tolerates(taint) for tol in request.tolerations):
                ok[i] = False
                break
    return ok


def _selector_ok(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp]) -> BoolArray:
    return np.array(
        [all(state.specs[row].labels.get(k) == v for k, v in request.node_selector) for row in rows],
        dtype=np.bool_,
    )


def _model_ok(state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp] | slice) -> BoolArray:
    codes = [state.model_id(model) for model in request.gpu_models]
    return np.isin(state.model[rows], np.array(codes, dtype=np.int64))


def filter_nodes(state: FleetState, request: PodRequest, *, explain: bool = False) -> FilterResult:
    """All rows that can hold `request` now; with `explain`, also the rejection count per filter."""
    n = state.n_rows
    sel = slice(0, n)
    wants_gpu = request.kind is not GpuKind.NONE
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
    if wants_gpu and request.gpu_models:
        steps.append((GPU_MODEL, _model_ok(state, request, sel)))
    steps.append((CPU, state.cpu_free[sel] >= request.cpu_milli))
    steps.append((MEMORY, state.mem_free[sel] >= request.memory_mib))
    if wants_gpu:
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
