"""Gang placement inside one scope: every pod set's minimum, then as many more as fit, or nothing.

Pods are placed one at a time, each through the capacity filters (over the scope's rows only), the
scoring policy and the GPU choice, and recorded in the caller's Statement. The first pass places each
pod set's `minimum` so a large first pod set cannot starve a later one; the second pass grows elastic
pod sets toward `count`. If a minimum cannot be met, the attempt returns the pod set that failed and the
caller rolls the statement back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GpuKind
from gpufleet.scheduler.placement.dra import gang as dra
from gpufleet.scheduler.placement.dra.result import ClaimAllocation
from gpufleet.scheduler.placement.filters import capacity_ok
from gpufleet.scheduler.placement.gpus import choose_gpus
from gpufleet.scheduler.placement.result import PodPlacement
from gpufleet.scheduler.placement.scoring import ScorePolicy, pick
from gpufleet.scheduler.placement.topology import Demand, Scope
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, Workload

RowArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class GangAttempt:
    """The pods placed by one attempt, or the pod set whose minimum could not be met."""

    placements: tuple[PodPlacement, ...]
    failed: PodSet | None = None


def _candidates(statement: Statement, demand: Demand, scope: Scope) -> RowArray:
    state = statement.state
    request = demand.request
    if scope.rows is None:
        n = state.n_rows
        mask = demand.static[:n] & capacity_ok(state, request, slice(0, n))
        return np.flatnonzero(mask)
    rows = scope.rows
    rows = rows[demand.static[rows] & capacity_ok(state, request, rows)]
    if scope.allowed is not None and rows.size:
        rows = _fits_allowed(statement, demand, scope, rows)
    return rows


def _fits_allowed(statement: Statement, demand: Demand, scope: Scope, rows: RowArray) -> RowArray:
    """Rows (of a one-node scope) whose allowed GPUs alone still hold one more pod."""
    state = statement.state
    request = demand.request
    assert scope.allowed is not None
    if request.kind is GpuKind.NONE:
        return rows
    kept = []
    for row in rows:
        try:
            choose_gpus(state, int(row), request, allowed=scope.allowed)
        except ValueError:
            continue
        kept.append(row)
    return np.array(kept, dtype=np.intp)


def _place_one(
    statement: Statement,
    workload: Workload,
    pod_set: PodSet,
    index: int,
    demand: Demand,
    scope: Scope,
    policy: ScorePolicy,
    rng: np.random.Generator,
) -> PodPlacement | None:
    rows = _candidates(statement, demand, scope)
    state = statement.state
    fits = None
    claims = dra.pod_claims(pod_set, index)
    joined: dict[str, ClaimAllocation] = {}
    if claims and rows.size:
        joined = dra.allocated_already(state, claims)
        rows = dra.joinable_rows(state, joined, rows) if joined else rows
        unallocated = tuple(c for c in claims if c.key not in joined)
        if unallocated and rows.size:
            rows, fits = dra.claim_rows(state, unallocated, rows, dra.others_allocated(pod_set, index))
    elif (
        (state.devices.nodes or state.devices.claims_only)
        and demand.request.kind is not GpuKind.NONE
        and rows.size
    ):
        rows = dra.extended_rows(state, rows)
    if not rows.size:
        return None
    request = demand.request
    scored = policy.score(state, request, rows)
    chosen = pick(scored, rng)
    row = int(rows[chosen])
    proposed = scored.gpus[chosen] if request.kind in (GpuKind.WHOLE, GpuKind.SHARE) else ()
    claimed: tuple[ClaimAllocation, ...] = ()
    own: tuple[ClaimAllocation, ...] = ()
    mig_gpu: int | None = None
    if fits is not None or joined:
        # The pod's own claims' devices (allocated now, or before) are the GPUs it gets: the fleet's
        # arrays must name the same ones. A shared claim's devices are held by the claim, counted in
        # no pod's request.
        made = {c.claim: c for c in fits.fits[state.names[row]]} if fits is not None else {}
        claimed = tuple(joined.get(c.key) or made[c.key] for c in claims)
        own = tuple(joined.get(c.key) or made[c.key] for c in claims if not c.shared)
        if own:
            proposed, mig_gpu = dra.device_gpus(state.devices.nodes.get(state.names[row]), own)
        if request.mig is not None and mig_gpu not in state.mig_gpus_with(row, request.mig):
            mig_gpu = None  # the node's MIG layout has no free instance there: the fleet picks one
    choice = choose_gpus(state, row, request, proposed=proposed, allowed=scope.allowed)
    pod = workload.pod_name(pod_set.name, index)
    alloc = statement.allocate(
        pod,
        row,
        request,
        choice.gpus,
        mig_gpu=choice.mig_gpu if mig_gpu is None else mig_gpu,
        devices=dra.held_devices(own),
        shared=tuple(c for c, claim in zip(claimed, claims, strict=False) if claim.shared),
    )
    return PodPlacement(pod, pod_set.name, state.names[row], row, alloc.gpus, alloc.milli, alloc.mig, claimed)


def place_gang(
    statement: Statement,
    workload: Workload,
    demands: Sequence[Demand],
    scope: Scope,
    *,
    policy: ScorePolicy,
    rng: np.random.Generator,
) -> GangAttempt:
    """Places the workload's pod sets inside `scope`; on failure the caller rolls back."""
    placed: list[PodPlacement] = []
    counts = [0] * len(workload.pod_sets)
    for minimum_pass in (True, False):
        for k, (pod_set, demand) in enumerate(zip(workload.pod_sets, demands, strict=True)):
            target = pod_set.minimum if minimum_pass else pod_set.count
            while counts[k] < target:
                found = _place_one(statement, workload, pod_set, counts[k], demand, scope, policy, rng)
                if found is None:
                    if minimum_pass:
                        return GangAttempt(tuple(placed), pod_set)
                    break
                placed.append(found)
                counts[k] += 1
    return GangAttempt(tuple(placed))
