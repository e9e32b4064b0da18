"""The placement entry point of the scheduling cycle: one workload, all its pods or a NoFit reason.

Steps, each a call:
1. demands: per pod set, the request and the nodes passing the static filters (cached per generation);
   a request no node could ever hold ends here with a NoFit that says so;
2. scopes: from the topology request, the domains to try, the preferred level's first, smallest fitting
   domain first; without a required level the last scope is the whole fleet;
3. gang: inside each scope, try to place every pod set's minimum (then more, up to count) within a
   statement checkpoint; keep the first success, roll back each failure;
4. explain: when nothing worked, a NoFit with per-filter counts and the topology shortfall.

A failed attempt leaves the fleet exactly as it was (the Statement's undo). Given a statement, the
placements stay in it for the caller to commit or discard (preemption's what-ifs); without one, the
placement is committed before returning.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gpufleet.fleet.request import GpuKind
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.dra import gang as dra
from gpufleet.scheduler.placement.dra.nodes import FILTER_NAME as DRA_FILTER
from gpufleet.scheduler.placement.filters import (
    CUDA_DRIVER,
    FILTER_ORDER,
    GPU,
    FilterResult,
    cuda_note,
    filter_nodes,
    never_fits,
    static_mask,
)
from gpufleet.scheduler.placement.gang import place_gang
from gpufleet.scheduler.placement.result import NoFit, PlacementResult, TopologyShortfall
from gpufleet.scheduler.placement.scoring import ScorePolicy
from gpufleet.scheduler.placement.topology import (
    ANYWHERE,
    Demand,
    Scope,
    candidate_scopes,
    largest_free_domain,
    level_rank,
    whole_gpus_needed,
)
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, Workload


def demands_of(state: FleetState, workload: Workload) -> list[Demand]:
    """Per pod set: its request, its minimum and the rows passing the static filters."""
    return [Demand(ps.request, ps.minimum, static_mask(state, ps.request)) for ps in workload.pod_sets]


def _scopes(state: FleetState, workload: Workload, demands: list[Demand]) -> Iterator[Scope]:
    required = workload.topology.required
    preferred = workload.topology.preferred
    if preferred is not None and level_rank(state, preferred) is not None:
        finer = required is None or (level_rank(state, preferred) or 0) >= (level_rank(state, required) or 0)
        if finer:
            yield from candidate_scopes(state, preferred, demands)
    if required is None:
        yield ANYWHERE
    else:
        yield from candidate_scopes(state, required, demands)


def place_workload(
    state: FleetState,
    workload: Workload,
    *,
    policy: ScorePolicy,
    rng: np.random.Generator,
    statement: Statement | None = None,
) -> PlacementResult:
    """Places every pod set of `workload` (at least `min_count` each) or explains why it cannot.

    Pods are named `{workload}/{podset}/{index}`. The policy is told of every change (it becomes an
    observer of the statement).
    """
    own = statement is None
    stmt = Statement(state, observers=[policy]) if statement is None else statement
    stmt.add_observer(policy)
    for pod_set in workload.pod_sets:
        why = never_fits(state, pod_set.request)
        if why is not None:
            if own:
                stmt.discard()
            return _no_fit(state, workload, pod_set, f"pod set {pod_set.name} {why}", never=True)
    required = workload.topology.required
    if required is not None and level_rank(state, required) is None:
        if own:
            stmt.discard()
        levels = ", ".join(("nvlink", "host", *state.levels))
        return PlacementResult(
            workload.name,
            no_fit=NoFit(
                f"topology level {required!r} is not one of this fleet's levels ({levels})", never=True
            ),
        )

    demands = demands_of(state, workload)
    start = stmt.checkpoint()
    failed: PodSet | None = None
    for scope in _scopes(state, workload, demands):
        attempt = place_gang(stmt, workload, demands, scope, policy=policy, rng=rng)
        if attempt.failed is None:
            if own:
                stmt.commit()
            return PlacementResult(workload.name, attempt.placements, domain=scope.domain)
        stmt.rollback(start)
        failed = attempt.failed
    if own:
        stmt.discard()
    return _explain(state, workload, demands, failed)


def _filters_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[name]} {name}" for name in (*FILTER_ORDER, DRA_FILTER) if name in counts)


def _claims_text(state: FleetState, pod_set: PodSet, result: FilterResult) -> str:
    """For a pod set with DRA claims: the nodes that pass every other filter but cannot give the claims
    their devices count under `DynamicResources`, and the allocator's reason is appended. For a pod set
    asking GPUs as extended resources, the nodes whose GPUs go through claims only count under
    `InsufficientGPU`, as in Kubernetes, where such a node advertises no `nvidia.com/gpu`."""
    if not pod_set.claims:
        devices = state.devices
        if pod_set.request.kind is not GpuKind.NONE and (devices.nodes or devices.claims_only):
            rows = result.rows
            kept = dra.extended_rows(state, rows)
            if kept.size < rows.size:
                result.rejected[GPU] = result.rejected.get(GPU, 0) + int(rows.size - kept.size)
                result.feasible[rows] = False
                result.feasible[kept] = True
        return ""
    rows = result.rows
    kept, answer = dra.claim_rows(state, dra.pod_claims(pod_set, 0), rows)
    if kept.size < rows.size:
        result.rejected[DRA_FILTER] = int(rows.size - kept.size)
        result.feasible[rows] = False
        result.feasible[kept] = True
    return f"; {answer.message()}"


def _nodes_text(state: FleetState, result: FilterResult, pod_set: str) -> str:
    """kube-scheduler's summary: `2/12 nodes can hold a pod of pod set main: 4 InsufficientGPU, ...`."""
    alive = int(np.count_nonzero(state.alive[: state.n_rows]))
    feasible = int(np.count_nonzero(result.feasible))
    text = f"{feasible}/{alive} nodes can hold a pod of pod set {pod_set}"
    return f"{text}: {_filters_text(result.rejected)}" if result.rejected else text


def _no_fit(
    state: FleetState,
    workload: Workload,
    pod_set: PodSet,
    message: str,
    *,
    never: bool = False,
    topology: TopologyShortfall | None = None,
) -> PlacementResult:
    result = filter_nodes(state, pod_set.request, explain=True)
    claims = _claims_text(state, pod_set, result)
    message = f"{message} ({_nodes_text(state, result, pod_set.name)}){claims}"
    return PlacementResult(
        workload.name,
        no_fit=NoFit(message, pod_set.name, result.rejected, topology, never),
    )


def _shortfall(state: FleetState, level: str, demands: list[Demand]) -> TopologyShortfall:
    # Free GPUs count only where every GPU pod set of the gang passes its static filters.
    usable = np.ones(state.n_rows, dtype=np.bool_)
    for demand in demands:
        if demand.request.kind is not GpuKind.NONE:
            usable &= demand.static[: state.n_rows]
    domain, free = largest_free_domain(state, level, usable)
    return TopologyShortfall(level, whole_gpus_needed(demands), domain, free)


def _explain(
    state: FleetState, workload: Workload, demands: list[Demand], failed: PodSet | None
) -> PlacementResult:
    """The NoFit of a workload whose every scope failed (the fleet is already rolled back)."""
    required = workload.topology.required
    if required is not None and failed is None:
        # No domain of the level even passed the capacity count.
        gap = _shortfall(state, required, demands)
        where = ""
        if gap.largest_free is not None:
            where = (
                f"; the largest free {required} domain is {gap.largest_free.name} "
                f"with {gap.largest_free_gpus} free GPUs"
            )
        message = (
            f"no {required} domain can hold the {workload.min_pod_count} pods of the gang "
            f"({gap.required_gpus} GPUs) at once{where}"
        )
        return _no_fit(state, workload, workload.pod_sets[0], message, topology=gap)
    assert failed is not None
    counts = filter_nodes(state, failed.request, explain=True)
    claims = _claims_text(state, failed, counts)
    feasible = int(np.count_nonzero(counts.feasible))
    alive = int(np.count_nonzero(state.alive[: state.n_rows]))
    if feasible == 0:
        message = _nodes_text(state, counts, failed.name)
    else:
        message = (
            f"pod set {failed.name} needs {failed.minimum} pods at once; {feasible}/{alive} nodes have room "
            "for one, not enough for all"
        )
    topology = None
    if required is not None:
        topology = _shortfall(state, required, demands)
        message += f" inside one {required} domain"
    if feasible and counts.rejected:
        message += f" ({_filters_text(counts.rejected)})"
    if CUDA_DRIVER in counts.rejected:
        # The count alone does not say what driver the pod needs, nor what the fleet has.
        message += f"; {cuda_note(state, failed.request)}"
    message += claims
    return PlacementResult(workload.name, no_fit=NoFit(message, failed.name, counts.rejected, topology))
