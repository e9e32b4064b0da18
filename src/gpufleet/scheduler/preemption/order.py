"""Victim order and set cost: the one key candidates are given up by, and what a whole set costs.

Kueue keeps all victim ordering in one comparator; here `victim_order` orders single candidates and
`VictimSet.cost` applies the same rules, in the same order, to a set of them (docs/scheduling.md
decision 9).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from gpufleet.scheduler.cache import Admitted

RECLAIM = "Reclaim"
WITHIN_QUEUE = "WithinQueue"
BORROW = "BorrowWithinCohort"


Kind = Literal["shrink", "evict"]

LOWEST_PRIORITY = -(1 << 62)
"""Below every priority: the top priority of an empty set, and the least a bound can say."""


VictimOrder = tuple[int, int, float, int, float, str]
"""`victim_order` of a candidate, its parts in the order they count: (evicts: 0 for a shrink, 1 for an
evict; own queue: 1 when taken from the preemptor's own queue, 0 from another queue that borrows; lost
GPU-seconds; priority; minus the admission time, so that the later admitted comes first; name).

A plain tuple, read by unpacking, and not a NamedTuple: every kept candidate holds one, and so does
each queue's least order per node, by the hundred thousand; the garbage collector stops tracking a
plain tuple of numbers and strings but never a NamedTuple, and so many tracked ones lengthened every
full collection (the admission benchmark's p99 preemption latency tripled)."""


LeastOrder = tuple[int, int, float, int, float, tuple[str]]
"""Some candidates' `victim_order`, part by part at its least, the name as a 1-tuple: the names of a
set of one victim, ready for the bound it gives (`scopes.ScopeEntry`) without a new tuple per node
scope and search."""


class SetCost(NamedTuple):
    """`VictimSet.cost`: `VictimOrder`'s parts for a whole set, in the same order."""

    evicts: int
    """1 when any victim is evicted whole, 0 for shrinks only."""
    own_queue: int
    """1 when any victim is of the preemptor's own queue."""
    lost_gpu_seconds: float
    """In all."""
    top_priority: int
    newest: float
    """Minus the oldest victim's admission time."""
    victims: int
    names: tuple[str, ...]
    """Sorted."""


class SetRank(NamedTuple):
    """How a set ranks among the sets of every scope (decision 8 before `VictimSet.cost`); a scope's
    bound is the least rank any of its sets can have."""

    below_nominal: int
    """0 when the set leaves every other queue at or above its nominal quota, else 1."""
    cost: SetCost


@dataclass(slots=True)
class Candidate:
    """One way to free capacity: shrink an elastic workload to its minimum, or evict it whole.

    Not frozen for one reason: the cache keeps a queue's candidates across cycles and re-times them in
    place (`lost_gpu_seconds` as of the cycle's time) rather than allocating thousands of new ones each
    cycle. A candidate's lost work is therefore that of the latest cycle that asked for its queue.
    """

    admitted: Admitted
    kind: Kind
    cause: str
    lost_gpu_seconds: float
    pods: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()
    """The nodes it frees capacity on (its pods', or for a shrink the removed pods'), each once."""
    held: tuple[int, ...] = ()
    """An evict's whole GPUs on each of `rows` (empty for a shrink)."""
    order: VictimOrder | None = None
    """`victim_order` of it as timed (set with its lost work, so sorting does not compute it again)."""

    @property
    def name(self) -> str:
        return self.admitted.name

    @property
    def priority(self) -> int:
        return self.admitted.workload.priority


def victim_order(candidate: Candidate) -> VictimOrder:
    """The one order in which candidates are given up, first = cheapest to lose.

    1. shrinking an elastic workload toward its minimum comes before evicting anything whole;
    2. reclaiming from another queue that borrows comes before evicting from the preemptor's own queue;
    3. less lost work first: GPUs x seconds since admission or a later checkpoint (`lostwork`);
    4. lower priority first;
    5. newer first: the later admitted has run for less time;
    6. name, a deterministic tie-break (names are unique in a cluster, like Kueue's uid).
    """
    workload = candidate.admitted.workload
    admitted_at = workload.admitted_at if workload.admitted_at is not None else 0.0
    return (
        0 if candidate.kind == "shrink" else 1,
        1 if candidate.cause == WITHIN_QUEUE else 0,
        candidate.lost_gpu_seconds,
        workload.priority,
        -admitted_at,
        workload.name,
    )


@dataclass(frozen=True, slots=True)
class VictimSet:
    preemptor: str
    victims: tuple[Candidate, ...]
    below_nominal: int = 0
    """`SetRank.below_nominal` of the set as `select_victims` chose it: 1 when it pushes another queue
    below its nominal quota (decision 8), which an elastic preemptor's choice of counts reads."""

    def cost(self) -> SetCost:
        """How much the set costs, cheapest first: `victim_order`'s rules for a set of victims.

        1. shrinks only (rule 1: elastic workloads are shrunk toward their minimum before anything is
           evicted whole);
        2. other queues' borrowers only (rule 2);
        3. less lost work in all (rule 3);
        4. lower top priority (rule 4);
        5. newer: its longest-running victim was admitted later (rule 5);
        6. fewer victims;
        7. names, a deterministic tie-break (rule 6).
        """
        victims = self.victims
        oldest = min((_admitted_at(c) for c in victims), default=0.0)
        return SetCost(
            1 if any(c.kind == "evict" for c in victims) else 0,
            1 if any(c.cause == WITHIN_QUEUE for c in victims) else 0,
            sum(c.lost_gpu_seconds for c in victims),
            max((c.priority for c in victims), default=LOWEST_PRIORITY),
            -oldest,
            len(victims),
            tuple(sorted(c.name for c in victims)),
        )


def _admitted_at(candidate: Candidate) -> float:
    admitted_at = candidate.admitted.workload.admitted_at
    return admitted_at if admitted_at is not None else 0.0


def order_of(candidate: Candidate) -> VictimOrder:
    """`victim_order` of `candidate` as last timed (`Candidate.order`), else computed now."""
    order = candidate.order
    return order if order is not None else victim_order(candidate)


def least_order(
    scoped: Sequence[Candidate], shrink_lost: Callable[[Candidate], float] | None = None
) -> LeastOrder:
    """Each part of `victim_order` at its least over `scoped` (not empty): since `victim_order`'s
    parts are a victim's share of each part of `VictimSet.cost`, no set of these candidates costs less
    in any part (`least_rank`). A shrink, which may give up less than all its pods, counts the lost work
    `shrink_lost` says (by default none)."""
    first = scoped[0]
    evicts, own, lost, priority, newest, name = order_of(first)
    if first.kind == "shrink":
        lost = 0.0 if shrink_lost is None else shrink_lost(first)
    for candidate in scoped[1:]:
        its_evicts, its_own, its_lost, its_priority, its_newest, its_name = order_of(candidate)
        if its_evicts < evicts:
            evicts = its_evicts
        if its_own < own:
            own = its_own
        if candidate.kind == "shrink":
            its_lost = 0.0 if shrink_lost is None else shrink_lost(candidate)
        if its_lost < lost:
            lost = its_lost
        if its_priority < priority:
            priority = its_priority
        if its_newest < newest:
            newest = its_newest
        if its_name < name:
            name = its_name
    return evicts, own, lost, priority, newest, (name,)


def least_rank(least: LeastOrder, below_nominal: int = 0) -> SetRank:
    """The rank no set of the candidates of `least` goes below: a set of one victim with each part of
    its order at its least (its one name the first of them, which no sorted names precede)."""
    evicts, own, lost, priority, newest, names = least
    return SetRank(below_nominal, SetCost(evicts, own, lost, priority, newest, 1, names))
