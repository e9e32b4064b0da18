"""What a scheduling cycle decides, and how an in-memory world carries it out.

`CycleResult` is what `Scheduler.cycle` returns to every world. The outcomes below it are what one
workload's attempt inside a cycle comes to, before the cycle records it as decisions; only the cycle
(`cycle.py`) and its capacity to come (`capacity_to_come.py`) use them. `apply_decisions` is how the
in-memory worlds (the scenario runner, the simulator, benchmarks) carry out a cycle; the embedded
control plane and Kubernetes have their own carriers (`controllers.decisions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.fleet.state import Allocation
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.explain import Admit, Pending, Preempt, Reason
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.placement.dra.result import ClaimAllocation
from gpufleet.scheduler.preemption import VictimSet


@dataclass(slots=True)
class CycleResult:
    """What one cycle decided. `preempted` come first when applied, then `admitted`."""

    admitted: list[Admit] = field(default_factory=list)
    preempted: list[Preempt] = field(default_factory=list)
    pending: dict[str, Pending] = field(default_factory=dict)
    nominated: list[str] = field(default_factory=list)
    settled: bool = False
    """Nothing was decided, and a cycle on the same cache at any later time would attempt and decide
    nothing either (`scheduler.settled`): a world may skip its periodic pass until the cache changes."""
    errors: dict[str, Exception] = field(default_factory=dict)
    """Workloads whose attempt raised (a bug their numbers trip, no user's doing), with the error: each
    waits with it as its reason (`explain.scheduling_error`). The core only hands them back; a world
    logs each with its traceback and counts it as a contained failure (`controllers.failures`)."""

    @property
    def changed(self) -> bool:
        return bool(self.admitted or self.preempted)


@dataclass(frozen=True, slots=True)
class Admission:
    """Admitted on a flavor, with the places the snapshot holds for it."""

    assignment: Assignment
    allocations: tuple[Allocation, ...]
    nodes: tuple[str, ...]
    claims: tuple[tuple[ClaimAllocation, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Preemption:
    victims: VictimSet


@dataclass(frozen=True, slots=True)
class Waiting:
    """Fits once leaving pods are gone: it waits for them, holding its quota and its place among them."""

    admission: Admission
    leaving: tuple[str, ...]
    """The leaving pods on the nodes it will take (what it waits for)."""


@dataclass(frozen=True, slots=True)
class Failure:
    reason: Reason
    searched: bool = False
    """True when a preemption search ran for this workload and found no victims."""
    quota_short: tuple[str | None, ...] = ()
    """The flavors tried that failed on quota (or the per-user limit) rather than on placement."""


Outcome = Admission | Preemption | Waiting | Failure


def apply_decisions(cache: ClusterCache, result: CycleResult, *, now: float) -> None:
    """How an in-memory world carries out a cycle: evictions and shrinks first, then admissions.

    Where evictions take time (`cache.graceful_evictions`), the pods given up go on holding what they
    held, as leaving pods, until the world says they are gone (`ClusterCache.gone`)."""
    for preempt in result.preempted:
        admitted = cache.admitted.get(preempt.victim)
        if admitted is None:
            continue
        given = []
        if cache.graceful_evictions:
            given = [admitted.pods[pod] for pod in preempt.pods or admitted.pods if pod in admitted.pods]
        if preempt.whole:
            cache.evict(preempt.victim, now=now)
        else:
            cache.shrink(preempt.victim, preempt.pods, preempt.counts, now=now)
        for allocation in given:
            cache.hold_leaving(allocation)
    for admit in result.admitted:
        workload = cache.pending[admit.workload]
        cache.admit(workload, admit.assignment, admit.allocations, now=now)
    cache.nominated = list(result.nominated)
