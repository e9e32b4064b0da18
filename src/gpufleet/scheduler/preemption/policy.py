"""Candidates and policy: which admitted workloads a preemptor may take from, under its queue's rules.

A candidate comes from the preemptor's own queue (`withinQueue`) or, while that queue borrows, from
another queue of its tree (`reclaimWithinCohort` when the preemptor stays within its nominal quota,
`borrowWithinCohort` when it would borrow); never a non-preemptible workload, never one inside its
queue's `minRuntimeSeconds` (docs/scheduling.md decisions 8 and 14). The queues' lists are kept across
cycles (`kept`); a preemptor's pool merges them only as far as the search reads (`pool`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.scheduler.attained import running_level, waiting_level
from gpufleet.scheduler.cache import Admitted, Snapshot
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.preemption.kept import kept_candidates
from gpufleet.scheduler.preemption.order import BORROW, RECLAIM, WITHIN_QUEUE, Candidate
from gpufleet.scheduler.preemption.pool import CandidatePool, PoolPart
from gpufleet.scheduler.queueing import QueueSettings
from gpufleet.scheduler.workload import Workload


class LasRank(NamedTuple):
    """In a least-attained-service queue: the preemptor's level and how to find a victim's now."""

    preemptor: int
    victim: Callable[[Admitted], int]


def las_rank(snapshot: Snapshot, preemptor: Workload, settings: QueueSettings, now: float) -> LasRank | None:
    """The levels a least-attained-service queue compares (Tiresias: a workload of a lower level, less
    service, preempts one of a higher level); None for other queues."""
    if not settings.least_attained:
        return None
    las, service = settings.las, snapshot.cache.service
    mine = waiting_level(las, service.of(preemptor.name), submitted_at=preemptor.submitted_at, now=now)

    def victim(admitted: Admitted) -> int:
        workload = admitted.workload
        before = service.of(workload.name)
        milli = admitted.assignment.gpu_milli
        return running_level(las, before, gpu_milli=milli, admitted_at=workload.admitted_at, now=now)

    return LasRank(mine, victim)


def _cause(
    *,
    victim: Admitted,
    preemptor: Workload,
    settings: QueueSettings,
    borrowing: bool,
    rank: LasRank | None = None,
) -> str | None:
    """Why `preemptor` may evict `victim` under its queue's policy, or None when it may not."""
    policy = settings.preemption
    vp, pp = victim.workload.priority, preemptor.priority
    if victim.queue == preemptor.queue:
        if policy.within_queue == "LowerPriority" and (
            vp < pp or (rank is not None and vp == pp and rank.victim(victim) > rank.preemptor)
        ):
            return WITHIN_QUEUE
        if policy.within_queue == "LowerOrNewerEqualPriority" and (
            vp < pp or (vp == pp and victim.workload.submitted_at > preemptor.submitted_at)
        ):
            return WITHIN_QUEUE
        return None
    if not borrowing:
        rule = policy.reclaim_within_cohort
        if rule == "Any" or (rule == "LowerPriority" and vp < pp):
            return RECLAIM
        return None
    if policy.borrow_within_cohort == "LowerPriority" and vp < pp:
        threshold = policy.max_priority_threshold
        if threshold is None or vp <= threshold:
            return BORROW
    return None


def candidates(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, *, now: float
) -> Sequence[Candidate]:
    """Every workload the preemptor may take capacity from, as shrink and/or evict candidates, in
    `victim_order` (a `CandidatePool`: the queues' kept lists, merged only as far as the search reads
    them)."""
    cache = snapshot.cache
    tree = cache.tree
    own_settings = cache.settings[preemptor.queue]
    root = tree.root_of(preemptor.queue)
    guarantor = _guarantor(snapshot, preemptor, assignment)
    borrowing = guarantor is None
    # Decision 29: judged with its own queue's victims gone, a preemptor that borrows may stay within
    # nominal and reclaim (the search then keeps only sets after which it does). Under
    # `borrowWithinCohort: LowerPriority` it keeps that rule's candidates too, unconditionally (`both`).
    both = False
    if borrowing:
        guarantor = guarantor_after_own(snapshot, preemptor, assignment, now=now)
        both = guarantor is not None and own_settings.preemption.borrow_within_cohort != "Never"
        borrowing = guarantor is None
    flavors = set(assignment.usage)
    parts: list[PoolPart] = []
    queues: list[tuple[str, str]] = []
    if own_settings.preemption.within_queue != "Never":
        queues.append((preemptor.queue, WITHIN_QUEUE))
    if _reaches_others(own_settings, borrowing):
        every_borrower = [
            q
            for q in _borrowing_queues(snapshot, root, flavors)
            if q != preemptor.queue and subtree_borrows(snapshot, q, preemptor.queue, flavors)
        ]
        others = every_borrower
        if guarantor is not None and guarantor != preemptor.queue:
            # Within an inner queue's quota (decision 27): it reclaims what that queue lends outside
            # its subtree, not what the subtree's own members share of it.
            others = [q for q in others if guarantor not in tree.paths[q]]
        if both:
            queues.extend((q, BORROW) for q in every_borrower)
        queues.extend((q, BORROW if borrowing else RECLAIM) for q in others)
    reclaim_any = own_settings.preemption.reclaim_within_cohort == "Any"
    held = cache.admitted.get(preemptor.name)
    charges = cache.charges
    # Per cycle, the queues whose kept part every preemptor of this tree and flavors takes whole, when
    # found so: at the same charge count and stamp, taken again at once.
    whole = _whole_parts(snapshot, root, flavors, now)
    rank = las_rank(snapshot, preemptor, own_settings, now)
    for queue, kind in queues:
        # Reclaim with `Any` takes every workload of a borrowing queue: no per-victim rule to check
        # (unless the same queue's `borrowWithinCohort` candidates come first: `both`).
        every = kind == RECLAIM and reclaim_any and not both
        if every and (held is None or held.queue != queue):
            known = whole.get(queue)
            if (
                known is not None
                and known.charges == charges.get(queue, 0)
                and known.part.stamp == known.stamp
            ):
                if known.part.kept:
                    parts.append(known.part)
                continue
        kept, part = kept_candidates(snapshot, queue, kind, now=now)
        if (
            part is not None
            and every
            and (held is None or held.queue != queue)
            and (not flavors or part.meets(flavors))
        ):
            whole[queue] = _WholePart(charges.get(queue, 0), part, part.stamp)
            if part.kept:
                parts.append(part)  # the whole kept list: its order and per-node groups are kept too
            continue
        out = []
        for candidate in kept:
            admitted = candidate.admitted
            if candidate.name == preemptor.name or (
                flavors and flavors.isdisjoint(admitted.assignment.usage)
            ):
                continue
            if every or kind == _cause(
                victim=admitted,
                preemptor=preemptor,
                settings=own_settings,
                borrowing=kind == BORROW,
                rank=rank,
            ):
                if (
                    both
                    and kind == RECLAIM
                    and _cause(victim=admitted, preemptor=preemptor, settings=own_settings, borrowing=True)
                ):
                    continue  # already a `borrowWithinCohort` candidate, taken without condition
                out.append(candidate)
        if out:
            parts.append(PoolPart(out))
    return CandidatePool(parts)


class _WholePart(NamedTuple):
    """A queue's kept part found taken whole, as it was then."""

    charges: int
    """The queue's charge count (`ClusterCache.charges`)."""
    part: PoolPart
    stamp: int
    """The part's stamp (`PoolPart.stamp`): another once its candidates are re-timed."""


@dataclass(frozen=True, slots=True)
class _WholeKey:
    """`Snapshot.memo` key of `_whole_parts`."""

    root: str
    flavors: frozenset[str]
    now: float


def _whole_parts(snapshot: Snapshot, root: str, flavors: set[str], now: float) -> dict[str, _WholePart]:
    """`candidates`' per-cycle memo of the queues' parts taken whole (see there), per queue."""
    key = _WholeKey(root, frozenset(flavors), now)
    found = snapshot.memo.get(key)
    if not isinstance(found, dict):
        found = snapshot.memo[key] = {}
    return found


@dataclass(slots=True)
class _Borrowers:
    """`_borrowing_queues`' memo for one tree and set of flavors: the answer at a usage version, and
    each queue looked at as it was then."""

    version: int
    queues: list[str]
    seen: dict[str, _Seen]


_Seen = tuple[int, bool]
"""A queue as `_borrowing_queues` last looked at it: its charge count (`ClusterCache.charges`) and
whether it borrowed then. A plain tuple, not a NamedTuple: one is made for every queue of the tree
once a cycle, and only plain tuples are reused when freed (see `scopes.ScopeEntry`)."""
_UNSEEN: _Seen = (-1, False)


@dataclass(frozen=True, slots=True)
class _BorrowersKey:
    """`Snapshot.memo` key of `_borrowing_queues`."""

    root: str
    flavors: frozenset[str]


def _borrowing_queues(snapshot: Snapshot, root: str, flavors: set[str]) -> list[str]:
    """The queues of the tree under `root` with admitted workloads that borrow one of `flavors`.

    Memo for the cycle: every preemptor of a cycle scans the same tree, and usage (so who borrows, and
    who has members) changes only between some of them, and then for a few queues. A queue without
    child queues changes its usage only when it is charged or refunded (`ClusterCache.charges`, never
    undone), so at the same charge count its answer stands; a queue with children is looked at again."""
    cache = snapshot.cache
    usage = cache.usage
    key = _BorrowersKey(root, frozenset(flavors))
    found = snapshot.memo.get(key)
    if isinstance(found, _Borrowers) and found.version == usage.version:
        return list(found.queues)
    tree = cache.tree
    children, charges = tree.children, cache.charges
    # Updated in place: an entry of a queue without members now is passed over, and looked at again
    # when it has members (a charge, so another count).
    seen: dict[str, _Seen] = found.seen if isinstance(found, _Borrowers) else {}
    queues = []
    for name, members in cache.by_queue.items():
        if not members:
            continue
        count = charges.get(name, 0)
        charges_then, borrowed_then = seen.get(name, _UNSEEN)
        if charges_then == count and not children.get(name):
            borrows = borrowed_then
        else:
            borrows = tree.root_of(name) == root and borrows_any(snapshot, name, flavors)
            seen[name] = (count, borrows)
        if borrows:
            queues.append(name)
    snapshot.memo[key] = _Borrowers(usage.version, queues, seen)
    return list(queues)


def _guarantor(snapshot: Snapshot, preemptor: Workload, assignment: Assignment) -> str | None:
    """The queue whose nominal quota holds the preemptor (its own, or an inner queue's: decision 27);
    None when it would borrow from the root."""
    return snapshot.cache.usage.guarantor(preemptor.queue, assignment.usage)


def _is_borrowing(snapshot: Snapshot, preemptor: Workload, assignment: Assignment) -> bool:
    return _guarantor(snapshot, preemptor, assignment) is None


def borrows_now(snapshot: Snapshot, preemptor: Workload, assignment: Assignment) -> bool:
    """Whether the preemptor would borrow were it admitted on the usage as it is (decision 27)."""
    return _is_borrowing(snapshot, preemptor, assignment)


def guarantor_after_own(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, *, now: float
) -> str | None:
    """For a preemptor that would borrow: the queue whose nominal quota would hold it once every
    workload of its own queue that its `withinQueue` policy lets it take is gone, or None (decision 29).

    None as well when its policy takes nothing of its own queue or has `reclaimWithinCohort: Never`.
    With `borrowWithinCohort: LowerPriority` the rule applies too: its borrowing candidates stay, the
    reclaim ones are added (`candidates`). Preemptibility and minimum runtimes are not looked at: this
    only opens the door to reclaim candidates; the search keeps only sets after which the preemptor is
    within its nominal quota (`Search`)."""
    cache = snapshot.cache
    policy = cache.settings[preemptor.queue].preemption
    if policy.within_queue == "Never" or policy.reclaim_within_cohort == "Never":
        return None
    settings = cache.settings[preemptor.queue]
    rank = las_rank(snapshot, preemptor, settings, now)  # a least-attained-service queue's levels count
    usage = cache.usage
    freed: dict[str, int] = {}
    for name in cache.by_queue.get(preemptor.queue, ()):
        admitted = cache.admitted.get(name)
        if admitted is None or name == preemptor.name or not admitted.workload.preemptible:
            continue
        if (
            _cause(victim=admitted, preemptor=preemptor, settings=settings, borrowing=True, rank=rank)
            != WITHIN_QUEUE
        ):
            continue
        for flavor, amount in admitted.assignment.usage.items():
            if flavor in assignment.usage:
                freed[flavor] = freed.get(flavor, 0) + amount
    if not freed:
        return None
    version = usage.version
    usage.add(preemptor.queue, freed, -1)
    try:
        return usage.guarantor(preemptor.queue, assignment.usage)
    finally:
        usage.add(preemptor.queue, freed, 1)
        usage.rewind(version)


def _reaches_others(settings: QueueSettings, borrowing: bool) -> bool:
    policy = settings.preemption
    if borrowing:
        return policy.borrow_within_cohort != "Never"
    return policy.reclaim_within_cohort != "Never"


def reaches_other_queues(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, *, now: float
) -> bool:
    """Whether the preemptor's policy lets it take from queues other than its own right now."""
    borrowing = _is_borrowing(snapshot, preemptor, assignment)
    if borrowing and guarantor_after_own(snapshot, preemptor, assignment, now=now) is not None:
        borrowing = False
    return _reaches_others(snapshot.cache.settings[preemptor.queue], borrowing)


def subtree_borrows(snapshot: Snapshot, queue: str, preemptor_queue: str, flavors: Iterable[str]) -> bool:
    """Whether a borrowing `queue` borrows from the preemptor's side of the tree (decision 38, Kueue's
    hierarchical cohorts): each queue on its path below the lowest one it shares with the preemptor's
    queue uses more than its subtree quota of one of `flavors`. A leaf over its own nominal whose
    organisation is within its own (its members lend to each other) takes nothing the preemptor's side
    lent: reclaiming from it would give back nothing borrowed. The leaf itself is judged by the caller.
    """
    paths = snapshot.cache.tree.paths
    mine = paths[preemptor_queue]
    for ancestor in paths[queue][1:]:
        if ancestor in mine:
            return True  # the lowest common ancestor: above it, the preemptor's side lends too
        if not borrows_any(snapshot, ancestor, flavors):
            return False
    return True


def judged_path(snapshot: Snapshot, queue: str, preemptor_queue: str) -> tuple[str, ...]:
    """A victim's queue and the queues above it below the lowest one it shares with the preemptor's
    queue: those whose borrowing reclaim takes back, each judged against its own subtree quota
    (decision 38). Just the queue itself in a tree one level deep."""
    paths = snapshot.cache.tree.paths
    mine = paths[preemptor_queue]
    path = paths[queue]
    for i, name in enumerate(path):
        if name in mine:
            return path[:i]
    return path


def borrows_any(snapshot: Snapshot, queue: str, flavors: Iterable[str]) -> bool:
    """Whether `queue` borrows any of `flavors` (uses more than its nominal quota of it)."""
    usage = snapshot.cache.usage
    return any(usage.borrowed(queue, flavor) > 0 for flavor in flavors)
