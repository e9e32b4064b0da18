"""Topology: the domains a gang may be confined to, smallest fitting first.

A level is `nvlink` (one NVLink domain: a group of GPUs inside a host, or a rack-scale fabric when the
fleet names one), `host` (one node), or a labelled level the fleet declares (zone, block, rack, ...).
Candidate domains come from the per-domain free totals the fleet keeps incrementally and from one
vectorised count of how many pods of each pod set every node could take, summed per domain with
`bincount`; nothing loops over nodes in Python. Candidates are ranked best fit first (the least free
capacity that still holds the gang), so big free domains stay whole for the gangs that need them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest
from gpufleet.fleet.state import HOST_LEVEL, NVLINK_LEVEL, WHOLE_MODES, FleetState
from gpufleet.scheduler.placement.filters import pods_that_fit, share_slots
from gpufleet.scheduler.placement.result import Domain

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
RowArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Scope:
    """Where one gang attempt may put pods: some rows (None: anywhere), and on a single row perhaps
    only the GPUs of `allowed` (one NVLink domain)."""

    rows: RowArray | None = None
    allowed: BoolArray | None = None
    domain: Domain | None = None


ANYWHERE = Scope()


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pod set needs from a domain: `minimum` pods of `request` on rows passing `static`."""

    request: PodRequest
    minimum: int
    static: BoolArray


def level_rank(state: FleetState, level: str) -> int | None:
    """How fine a level is (labelled levels coarse to fine, then host, then nvlink); None if unknown."""
    if level in state.levels:
        return state.levels.index(level)
    if level == HOST_LEVEL:
        return len(state.levels)
    if level == NVLINK_LEVEL:
        return len(state.levels) + 1
    return None


def whole_gpus_needed(demands: Sequence[Demand]) -> int:
    """GPUs the gang's minimum holds, a share or MIG instance counted as the fraction it takes."""
    milli = 0
    for d in demands:
        request = d.request
        if request.kind is GpuKind.WHOLE:
            milli += d.minimum * request.gpus * GPU_MILLI
        elif request.kind is GpuKind.SHARE:
            milli += d.minimum * request.gpu_milli
        elif request.kind is GpuKind.MIG:
            milli += d.minimum * GPU_MILLI // 7
    return -(-milli // GPU_MILLI)


def _whole_only(demands: Sequence[Demand]) -> int:
    return sum(d.minimum * d.request.gpus for d in demands if d.request.kind is GpuKind.WHOLE)


def _row_fit(state: FleetState, demand: Demand) -> IntArray:
    n = state.n_rows
    fit = pods_that_fit(state, demand.request, slice(0, n))
    return np.where(demand.static[:n], fit, 0)


def candidate_scopes(state: FleetState, level: str, demands: Sequence[Demand]) -> Iterator[Scope]:
    """Domains of `level` that could hold every pod set's minimum, smallest fitting first."""
    if level == NVLINK_LEVEL:
        yield from _nvlink_scopes(state, demands)
        if state.nvlink_level is not None:
            yield from _label_scopes(state, state.levels.index(state.nvlink_level), demands)
    elif level == HOST_LEVEL:
        yield from _host_scopes(state, demands)
    elif level in state.levels:
        yield from _label_scopes(state, state.levels.index(level), demands)


def _rank(ids: npt.NDArray[np.intp], key: npt.NDArray[np.float64] | IntArray) -> npt.NDArray[np.intp]:
    return ids[np.argsort(key[ids], kind="stable")]


def _label_scopes(state: FleetState, level_no: int, demands: Sequence[Demand]) -> Iterator[Scope]:
    level = state.levels[level_no]
    n = state.n_rows
    count = len(state.domain_keys[level_no])
    totals = state.free_whole_gpus_in(level)
    ok = np.ones(count, dtype=np.bool_)
    whole = _whole_only(demands)
    if whole:
        ok &= totals >= whole  # cheap prune on the incrementally kept totals
    if not ok.any():
        return
    doms = state.domain[level_no, :n]
    inside = doms >= 0
    capacity = np.zeros(count, dtype=np.float64)
    for demand in demands:
        cap = np.bincount(doms[inside], weights=_row_fit(state, demand)[inside], minlength=count)
        ok &= cap >= demand.minimum
        capacity += cap
    key = totals if whole else capacity
    order, bounds = state.domain_members(level_no)
    for dom in _rank(np.flatnonzero(ok), key):
        rows = order[bounds[dom] : bounds[dom + 1]]
        yield Scope(rows, None, Domain(level, state.domain_name(level_no, int(dom))))


def _host_scopes(state: FleetState, demands: Sequence[Demand]) -> Iterator[Scope]:
    n = state.n_rows
    ok = state.alive[:n].copy()
    capacity = np.zeros(n, dtype=np.float64)
    for demand in demands:
        fit = _row_fit(state, demand)
        ok &= fit >= demand.minimum
        capacity += fit
    key = state.whole_free[:n] if _whole_only(demands) else capacity
    for row in _rank(np.flatnonzero(ok), key):
        yield Scope(np.array([row], dtype=np.intp), None, Domain(HOST_LEVEL, state.names[row]))


def _gpu_units(state: FleetState, request: PodRequest, rows: RowArray) -> IntArray:
    """Per row and GPU: pods of this request that GPU alone could take (one for a free whole GPU)."""
    g = state.max_gpus
    if request.kind is GpuKind.WHOLE:
        free = (
            (state.gpu_free[rows] == GPU_MILLI) & state.gpu_ok[rows] & WHOLE_MODES[state.mode[rows]][:, None]
        )
        return np.asarray(free, dtype=np.int64)
    if request.kind is GpuKind.SHARE:
        return share_slots(state, request, rows)
    units = np.zeros((rows.size, g), dtype=np.int64)
    if request.kind is GpuKind.MIG:
        assert request.mig is not None
        for i, row in enumerate(rows):
            for gpu, instances in state.mig_instances(int(row)).items():
                if state.gpu_ok[row, gpu]:
                    units[i, gpu] = sum(
                        1 for p, _, holder in instances if p == request.mig and holder is None
                    )
    return units


def _nvlink_scopes(state: FleetState, demands: Sequence[Demand]) -> Iterator[Scope]:
    """One NVLink domain inside one host, for gangs small enough to share a node's NVLink group."""
    n = state.n_rows
    ok_rows = state.alive[:n].copy()
    row_fits = []
    for demand in demands:
        fit = _row_fit(state, demand)
        ok_rows &= fit >= demand.minimum
        row_fits.append(fit)
    rows = np.flatnonzero(ok_rows)
    if not rows.size:
        return
    groups = state.nvlink[rows]
    n_groups = int(groups.max(initial=-1)) + 1
    ok = np.ones((rows.size, n_groups), dtype=np.bool_)
    capacity = np.zeros((rows.size, n_groups), dtype=np.int64)
    for demand, fit in zip(demands, row_fits, strict=True):
        request = demand.request
        if request.kind is GpuKind.NONE:
            continue
        units = _gpu_units(state, request, rows)
        per_group = np.stack([(units * (groups == k)).sum(axis=1) for k in range(n_groups)], axis=1)
        if request.kind is GpuKind.WHOLE:
            per_group //= request.gpus
        # CPU and memory are per node: a group holds no more pods than the node does.
        per_group = np.minimum(per_group, fit[rows][:, None])
        ok &= per_group >= demand.minimum
        capacity += per_group
    for flat in _rank(np.flatnonzero(ok.ravel()), capacity.ravel()):
        i, k = divmod(int(flat), n_groups)
        row = int(rows[i])
        allowed = state.nvlink[row] == k
        yield Scope(
            np.array([row], dtype=np.intp), allowed, Domain(NVLINK_LEVEL, f"{state.names[row]}/nvlink{k}")
        )


def largest_free_domain(
    state: FleetState, level: str, usable: BoolArray | None = None
) -> tuple[Domain | None, int]:
    """The domain of `level` with the most free whole GPUs, and that number (for NoFit reasons).

    Only GPUs on `usable` rows count (the workload's static filters: not cordoned, taints tolerated, its
    GPU model), so the answer names GPUs the workload could have used; default: every live row.
    """
    n = state.n_rows
    rows_ok = state.alive[:n] if usable is None else state.alive[:n] & usable[:n]
    best: tuple[Domain | None, int] = (None, 0)
    if level in state.levels:
        level_no = state.levels.index(level)
        doms = state.domain[level_no, :n]
        rows = np.flatnonzero(rows_ok & (doms >= 0))
        if rows.size:
            totals = np.bincount(doms[rows], weights=state.whole_free[rows], minlength=int(doms.max()) + 1)
            # A domain with no usable node is no answer, even when every usable domain has 0 free GPUs.
            present = np.zeros(totals.size, dtype=np.bool_)
            present[doms[rows]] = True
            totals = np.where(present, totals, -1)
            dom = int(np.argmax(totals))
            best = (Domain(level, state.domain_name(level_no, dom)), int(totals[dom]))
    elif level == HOST_LEVEL:
        free = np.where(rows_ok, state.whole_free[:n], -1)
        if free.size and free.max() >= 0:
            row = int(np.argmax(free))
            best = (Domain(HOST_LEVEL, state.names[row]), int(free[row]))
    elif level == NVLINK_LEVEL:
        rows = np.flatnonzero(rows_ok)
        if rows.size:
            units = _gpu_units(state, PodRequest(gpus=1), rows)
            groups = state.nvlink[rows]
            for k in range(int(groups.max(initial=-1)) + 1):
                per = (units * (groups == k)).sum(axis=1)
                i = int(np.argmax(per))
                if per[i] > best[1] or best[0] is None:
                    best = (Domain(NVLINK_LEVEL, f"{state.names[rows[i]]}/nvlink{k}"), int(per[i]))
        if state.nvlink_level is not None:
            fabric, free_gpus = largest_free_domain(state, state.nvlink_level, usable)
            if fabric is not None and free_gpus > best[1]:
                best = (fabric, free_gpus)
    return best
