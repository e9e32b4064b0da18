"""Which GPUs of the chosen node a pod takes.

The scoring policy proposes GPUs; this module accepts them only when they obey the placement rules the
policy may not know about: the GPUs a topology scope allows (one NVLink domain of the node) and, for a
multi-GPU pod, one NVLink domain whenever the node has one with enough free GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import share_slots

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """GPUs for `FleetState.allocate`: whole or shared GPUs, or the GPU whose MIG instance to take."""

    gpus: tuple[int, ...] = ()
    mig_gpu: int | None = None


def _free_whole(state: FleetState, row: int, allowed: BoolArray | None) -> npt.NDArray[np.intp]:
    count = int(state.gpu_count[row])
    free = (state.gpu_free[row, :count] == GPU_MILLI) & state.gpu_ok[row, :count]
    if allowed is not None:
        free &= allowed[:count]
    return np.flatnonzero(free)


def nvlink_whole_gpus(
    state: FleetState, row: int, count: int, allowed: BoolArray | None = None
) -> tuple[int, ...]:
    """`count` free GPUs of `row`, all in one NVLink domain when one has enough.

    Best fit over domains (the fullest domain that still fits), so larger free domains stay whole for
    later multi-GPU pods; when no domain fits, the GPUs come from the fewest domains, largest first.
    """
    free = _free_whole(state, row, allowed)
    if free.size < count:
        raise ValueError(f"row {row} has {free.size} free GPUs, {count} asked")
    if count <= 1:
        return tuple(int(g) for g in free[:count])
    domains = state.nvlink[row, free]
    ids, sizes = np.unique(domains, return_counts=True)
    fitting = np.flatnonzero(sizes >= count)
    if fitting.size:
        best = fitting[np.argmin(sizes[fitting])]
        return tuple(int(g) for g in free[domains == ids[best]][:count])
    taken: list[int] = []
    for index in np.argsort(-sizes, kind="stable"):
        taken.extend(int(g) for g in free[domains == ids[index]])
        if len(taken) >= count:
            break
    return tuple(sorted(taken[:count]))


def _domains_spanned(state: FleetState, row: int, gpus: Sequence[int]) -> int:
    return len({int(state.nvlink[row, g]) for g in gpus})


def _whole_ok(
    state: FleetState, row: int, gpus: Sequence[int], count: int, allowed: BoolArray | None
) -> bool:
    if len(gpus) != count or len(set(gpus)) != count:
        return False
    limit = int(state.gpu_count[row])
    for g in gpus:
        if not 0 <= g < limit or not state.gpu_ok[row, g] or state.gpu_free[row, g] != GPU_MILLI:
            return False
        if allowed is not None and not allowed[g]:
            return False
    return True


def choose_gpus(
    state: FleetState,
    row: int,
    request: PodRequest,
    *,
    proposed: Sequence[int] = (),
    allowed: BoolArray | None = None,
) -> GpuChoice:
    """The GPUs the pod takes on `row`: the policy's proposal when it is valid, else our own pick."""
    kind = request.kind
    if kind is GpuKind.WHOLE:
        if _whole_ok(state, row, proposed, request.gpus, allowed) and (
            request.gpus == 1 or _domains_spanned(state, row, proposed) == 1
        ):
            return GpuChoice(tuple(proposed))
        mine = nvlink_whole_gpus(state, row, request.gpus, allowed)
        # A policy may spread across domains only when no single domain could hold the pod.
        if _whole_ok(state, row, proposed, request.gpus, allowed) and _domains_spanned(state, row, mine) > 1:
            return GpuChoice(tuple(proposed))
        return GpuChoice(mine)
    if kind is GpuKind.SHARE:
        slots = share_slots(state, request, np.array([row]))[0]
        if allowed is not None:
            slots = np.where(allowed[: slots.size], slots, 0)
        if len(proposed) == 1 and 0 <= proposed[0] < slots.size and slots[proposed[0]] > 0:
            return GpuChoice((int(proposed[0]),))
        fitting = np.flatnonzero(slots > 0)
        if not fitting.size:
            raise ValueError(f"row {row} has no GPU for a {request.gpu_milli} milli share")
        # Best fit: the fullest GPU that still takes the share keeps emptier GPUs free.
        free = state.gpu_free[row, fitting]
        return GpuChoice((int(fitting[np.argmin(free)]),))
    if kind is GpuKind.MIG:
        assert request.mig is not None
        if allowed is None:
            return GpuChoice(mig_gpu=None)
        for gpu in state.mig_gpus_with(row, request.mig):
            if allowed[gpu]:
                return GpuChoice(mig_gpu=gpu)
        raise ValueError(f"row {row} has no free {request.mig} instance on the allowed GPUs")
    return GpuChoice()
