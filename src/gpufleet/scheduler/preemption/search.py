"""The search: per scope the cheapest sufficient victim set, exactly while the scope is small, else
Kueue's greedy minimal set; scopes taken cheapest first by their bounds (docs/scheduling.md decisions 8
to 10).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from gpufleet.scheduler.cache import Snapshot
from gpufleet.scheduler.flavors import Assignment, usage_of
from gpufleet.scheduler.preemption.bounds import Bounds, quick_bound
from gpufleet.scheduler.preemption.feasibility import Capacity, capacity_feasible, quota_feasible
from gpufleet.scheduler.preemption.greedy import Fits, apply_candidate, apply_if_held, greedy_set
from gpufleet.scheduler.preemption.node_index import node_entries
from gpufleet.scheduler.preemption.options import Option, Options
from gpufleet.scheduler.preemption.order import RECLAIM, WITHIN_QUEUE, Candidate, SetRank, VictimSet, order_of
from gpufleet.scheduler.preemption.policy import borrows_now, candidates, judged_path, subtree_borrows
from gpufleet.scheduler.preemption.pool import CandidatePool
from gpufleet.scheduler.preemption.scopes import (
    LEAST_BELOW_NOMINAL,
    POSITION,
    SCOPE,
    TIGHT,
    Scope,
    ScopeEntry,
    bound_of,
    falls_short,
    node_scope,
    one_pod_whole_gpus,
    scope_entry,
    scope_level,
    scopes_of,
)
from gpufleet.scheduler.workload import Workload

EXACT_WORKLOADS = 12
"""A scope with more workloads than this is searched greedily (Kueue's minimal set), not exactly."""
EXACT_STEPS = 2_000
"""Sets the exact search may look at in one scope before it gives up for the greedy search."""
EXACT_TRIES = 16
"""Placements the exact search may try in one scope (its sets pass quota and a capacity bound first)."""
OUTSIDE_HEAD = 64
"""The pool's first candidates in victim order that `Search.outside` takes its workloads from."""


def select_victims(
    snapshot: Snapshot,
    preemptor: Workload,
    assignment: Assignment,
    fits: Fits,
    *,
    now: float,
    max_scopes: int = 64,
    pool: Sequence[Candidate] | None = None,
) -> VictimSet | None:
    """The cheapest victim set after which `fits()` holds, or None; the snapshot is unchanged.
    `pool`: the `candidates` already computed for this preemptor and snapshot state.

    Sets that push no other queue below its nominal quota come first; only when no scope has one may
    a set take one queue's last borrowing workload whole (a gang cannot be split; decision 8). Among
    those, `VictimSet.cost` decides."""
    if pool is None:
        pool = candidates(snapshot, preemptor, assignment, now=now)
    found: VictimSet | None = None
    fallback: VictimSet | None = None
    for phase in search_phases(snapshot, preemptor, assignment, pool):
        found = _select_across(
            snapshot, preemptor, assignment, fits, now, max_scopes, phase.pool, strict=phase.strict
        )
        if (
            found is not None
            and phase.within_only
            and not leaves_within(snapshot, preemptor, assignment, found)
        ):
            fallback, found = found, None  # stands only if no later phase gives a set
        if found is not None:
            break
    found = found or fallback
    if found is None or keeps_nominal(snapshot, Options(snapshot, preemptor, assignment, now), found.victims):
        return found
    return VictimSet(found.preemptor, found.victims, below_nominal=1)


class Phase(NamedTuple):
    """One search of `select_victims` (`search_phases`)."""

    pool: Sequence[Candidate]
    strict: bool
    """Every set must leave the preemptor within its nominal quota (decision 37)."""
    within_only: bool
    """A set found stands only if it leaves the preemptor within nominal; else it is kept and chosen
    only when no later phase gives a set."""


def search_phases(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, pool: Sequence[Candidate]
) -> list[Phase]:
    """The pools `select_victims` searches in turn; the first that gives a set wins.

    A preemptor that borrows now and has reclaim candidates (decision 29: its own queue's victims would
    bring it within nominal) is searched as Kueue's classical preemption runs. With
    `borrowWithinCohort: Never` a set after which it is within nominal comes first (decision 37): its
    own queue's cheapest set when that one does, else its own queue's cheapest of those that do (Kueue's
    run without borrowing gives back every other queue's victim not needed), else the cheapest over
    every candidate of those that do, else its own queue's cheapest, with which it borrows. With
    `LowerPriority`, first its own and borrowing candidates, then every candidate, a set that reclaims
    only if it brings the preemptor within nominal (decision 29)."""
    if not (
        isinstance(pool, CandidatePool) and _reclaims(pool) and borrows_now(snapshot, preemptor, assignment)
    ):
        return [Phase(pool, False, False)]
    own = CandidatePool([part for part in pool.parts if part.kept and part.kept[0].cause != RECLAIM])
    if snapshot.cache.settings[preemptor.queue].preemption.borrow_within_cohort == "Never":
        return [Phase(own, False, True), Phase(own, True, False), Phase(pool, True, False)]
    return [Phase(own, False, False), Phase(pool, False, False)]


def leaves_within(snapshot: Snapshot, preemptor: Workload, assignment: Assignment, found: VictimSet) -> bool:
    """Whether the preemptor is within its nominal quota (decision 27) with `found` taken (undone)."""
    mark = snapshot.mark()
    for candidate in found.victims:
        apply_if_held(snapshot, candidate)
    within = snapshot.cache.usage.guarantor(preemptor.queue, assignment.usage) is not None
    snapshot.rollback(mark)
    return within


CROSS_CANDIDATES = 24
"""Decision 31: a pool this small is also searched exactly over the whole fleet (a preemptor tried node
by node or domain by domain)."""
QUOTA_EXTRA = 4
"""Decision 31: the workloads outside a node or domain scope, cheapest first, whose candidates join the
scope's in its search when quota is short (victims that free quota may be anywhere)."""
QUOTA_SCOPE = 1 << 40
"""The position of the fleet scope of the pool's cheapest workloads (decision 31): after every node's and
domain's, so that equal bounds keep the scopes' order as before."""


def _select_across(
    snapshot: Snapshot,
    preemptor: Workload,
    assignment: Assignment,
    fits: Fits,
    now: float,
    max_scopes: int,
    pool: Sequence[Candidate],
    *,
    strict: bool = False,
) -> VictimSet | None:
    """The scopes' cheapest set, or, for a preemptor tried node by node or domain by domain with a small
    pool, a cheaper set whose victims are anywhere (decision 31): the victims that free quota may be
    anywhere in the tree, only those that free room must be where it is placed, which `fits` checks."""
    found = _select(snapshot, preemptor, assignment, fits, now, max_scopes, pool, strict=strict)
    if not pool or len(pool) > CROSS_CANDIDATES or scope_level(preemptor) is None:
        return found
    search = Search(snapshot, preemptor, assignment, fits, now, pool, strict=strict)
    scope = Scope(sorted(pool, key=order_of))
    units = search._units(scope.candidates)
    if len(units) > EXACT_WORKLOADS:
        return found
    victims = search._exact(scope, units)
    if victims is None:
        return found
    cross = VictimSet(preemptor.name, tuple(victims))
    if found is None:
        return cross
    rank = SetRank(0 if search.keeps_nominal(cross.victims) else 1, cross.cost())
    if rank < SetRank(0 if search.keeps_nominal(found.victims) else 1, found.cost()):
        return cross
    return found


def _reclaims(pool: Sequence[Candidate]) -> bool:
    """Whether the pool holds reclaim candidates (a pool's parts are one queue and cause each)."""
    if isinstance(pool, CandidatePool):
        return any(part.kept and part.kept[0].cause == RECLAIM for part in pool.parts)
    return any(c.cause == RECLAIM for c in pool)


def _select(
    snapshot: Snapshot,
    preemptor: Workload,
    assignment: Assignment,
    fits: Fits,
    now: float,
    max_scopes: int,
    pool: Sequence[Candidate],
    *,
    strict: bool = False,
) -> VictimSet | None:
    if not pool or not quota_feasible(snapshot, preemptor, assignment, pool):
        return None
    if not capacity_feasible(snapshot, preemptor, assignment, pool):
        return None
    search = Search(snapshot, preemptor, assignment, fits, now, pool, strict=strict)
    best: VictimSet | None = None
    best_key: SetRank | None = None
    # Cheapest first by a lower bound of any set a scope can give, so the search stops as soon as no
    # remaining scope can beat the best set found (a branch and bound over scopes). Two bounds: a quick
    # one from the candidates' own `victim_order` for every scope, and `Bounds.scope_bound` (tighter,
    # dearer) computed only for a scope that comes first by the quick one; the heap then orders it anew.
    # Equal bounds keep the scopes' order (their position; for node scopes, the node). A node scope
    # from the pool's parts is built only when it comes first (most never do).
    # The scopes in bound order are those of `ordered` (left as they are: a later search may use them
    # again) merged with those of `heap`; a node with an entry in `heap` is passed over in `ordered`.
    ordered: list[ScopeEntry] = []
    heap: list[ScopeEntry]
    passed: set[int] = set()
    needed: int | None = None
    if isinstance(pool, CandidatePool) and scope_level(preemptor) in ("host", "nvlink"):
        ordered, heap = node_entries(snapshot, pool)
        passed = {entry[POSITION] for entry in heap} if ordered else set()
        needed = one_pod_whole_gpus(preemptor)
    else:
        heap = [
            scope_entry(quick_bound(scope.candidates), tight=0, position=i, scope=scope)
            for i, scope in enumerate(scopes_of(snapshot, preemptor, pool))
        ]
    if (
        search.quota_short
        and scope_level(preemptor) is not None
        and not (one_pod_whole_gpus(preemptor) is not None and search.bounds.capacity_bound)
    ):
        # Decision 31: quota victims need not be where the preemptor is placed. The pool's cheapest
        # workloads make one more scope, over the fleet: a set of them frees quota wherever they run
        # and `fits` places the preemptor where there is room. For a one-pod preemptor only while a
        # node has room already: else a set frees room on a node, whose scope, joined by the cheapest
        # workloads outside it (`Search.scope`), has it.
        cheapest = search.outside(set(), EXACT_WORKLOADS)
        if cheapest:
            quota_scope = Scope(cheapest)
            heap.append(scope_entry(quick_bound(cheapest), tight=0, position=QUOTA_SCOPE, scope=quota_scope))
    heapq.heapify(heap)
    searched = at = 0
    while searched < max_scopes:
        while at < len(ordered) and ordered[at][POSITION] in passed:
            at += 1
        if at < len(ordered) and (not heap or ordered[at] < heap[0]):
            entry, listed = ordered[at], True
        elif heap:
            entry, listed = heap[0], False
        else:
            break
        bound = bound_of(entry)
        if best_key is not None and bound >= best_key:
            break
        if listed:
            at += 1
        else:
            heapq.heappop(heap)
        i, scope_or_parts = entry[POSITION], entry[SCOPE]
        if isinstance(scope_or_parts, Scope):
            scope = scope_or_parts
        elif needed is not None and falls_short(snapshot, i, scope_or_parts, needed):
            continue
        elif not bound.below_nominal and not entry[TIGHT] and search.bounds.below_nominal(i, scope_or_parts):
            # Its tight bound starts with 1: until a scope at nominal is ruled out, it waits with a bound
            # that low, but no lower than its tight one (and not yet tight). Scopes are searched in the
            # order of their tight bounds whatever lower bounds they wait with, so this changes nothing
            # but the tight bounds computed (most nodes of a tree that borrows little are such).
            heapq.heappush(heap, scope_entry(LEAST_BELOW_NOMINAL, tight=0, position=i, scope=scope_or_parts))
            continue
        else:
            scope = node_scope(i, scope_or_parts)
        if not entry[TIGHT]:
            # The tight bound is at least the quick one part by part: never below it.
            tight = max(bound, search.bounds.scope_bound(scope))
            heapq.heappush(heap, scope_entry(tight, tight=1, position=i, scope=scope))
            continue
        searched += 1
        found = search.scope(scope)
        if found is None:
            continue
        key = SetRank(0 if search.keeps_nominal(found.victims) else 1, found.cost())
        if best_key is None or key < best_key:
            best, best_key = found, key
    return best


class Search:
    """The victim search for one preemptor in one snapshot state (see `select_victims`)."""

    def __init__(
        self,
        snapshot: Snapshot,
        preemptor: Workload,
        assignment: Assignment,
        fits: Fits,
        now: float,
        pool: Sequence[Candidate],
        *,
        strict: bool = False,
    ) -> None:
        self.options = Options(snapshot, preemptor, assignment, now)
        self.bounds = Bounds(self.options)
        self.snapshot = snapshot
        self.preemptor = preemptor
        self.assignment = assignment
        self.flavors = self.options.flavors
        self.fits = fits
        # Decision 29: a preemptor that borrows now has reclaim candidates only because its own queue's
        # victims would bring it within nominal; it may take them only in sets that do bring it there.
        # Decision 37: `strict`, every set must bring it within nominal, whatever it takes.
        self.strict = strict
        self.conditional = strict or (_reclaims(pool) and borrows_now(snapshot, preemptor, assignment))
        self.pool = pool
        self._head: list[Candidate] | None = None
        self._paths: dict[str, tuple[str, ...]] = {}
        # Decision 31: while quota does not fit (or only sets that bring it within nominal may reclaim),
        # victims anywhere may free it: a node's or domain's scope is searched with the pool's cheapest
        # workloads outside it as well. Otherwise victims elsewhere free nothing it needs.
        short = snapshot.cache.usage.fits(preemptor.queue, assignment.usage) is not None
        self.quota_short = self.conditional or short
        # Decision 39: the queues whose limits bind the preemptor's quota, per flavor short; a workload
        # outside the scope frees quota it needs only if its refund reaches one of them.
        self._limits = snapshot.cache.usage.limits(preemptor.queue, assignment.usage) if short else {}

    def outside(self, inside: set[str], workloads: int) -> list[Candidate]:
        """The candidates, in victim order, of the pool's first `workloads` workloads not in `inside`,
        among the pool's first `OUTSIDE_HEAD` candidates (merged once per search; a workload's evict,
        which may come later than its shrink, is taken when it is among them)."""
        head = self._head
        if head is None:
            pool = self.pool
            limits = self._limits
            if isinstance(pool, CandidatePool):
                if limits:
                    # Decision 39: only the parts (one queue each) whose refunds reach a binding queue.
                    pool = CandidatePool([p for p in pool.parts if p.kept and self._relieves(p.kept[0])])
                head = pool.head(OUTSIDE_HEAD)
            else:
                useful = [c for c in pool if self._relieves(c)] if limits else pool
                head = sorted(useful, key=order_of)[:OUTSIDE_HEAD]
            self._head = head
        names: set[str] = set()
        out: list[Candidate] = []
        for candidate in head:
            name = candidate.name
            if name in inside:
                continue
            if name not in names:
                if len(names) == workloads:
                    continue
                names.add(name)
            out.append(candidate)
        return out

    def _own_may_bring_within(self, candidates: Sequence[Candidate]) -> bool:
        """Whether, with every own-queue candidate among `candidates` taken at its most, the preemptor
        would be within nominal: else no set of them is (quota arithmetic only, undone)."""
        freed: dict[str, int] = {}
        most: dict[str, Mapping[str, int]] = {}
        for candidate in candidates:
            if candidate.cause != WITHIN_QUEUE:
                continue
            amounts = self.options.option(candidate).amounts
            have = most.get(candidate.name)
            if have is None or sum(amounts.values()) > sum(have.values()):
                most[candidate.name] = amounts
        for taken in most.values():
            for flavor, amount in taken.items():
                freed[flavor] = freed.get(flavor, 0) + amount
        if not freed:
            return False
        usage = self.snapshot.cache.usage
        version = usage.version
        usage.add(self.preemptor.queue, freed, -1)
        try:
            return self._within()
        finally:
            usage.add(self.preemptor.queue, freed, 1)
            usage.rewind(version)

    def _relieves(self, candidate: Candidate) -> bool:
        """Whether giving up `candidate` lowers the usage of a queue whose limit binds the preemptor's
        quota (decision 39): in a deep tree a borrower elsewhere frees the root's quota, not that of
        the organisation at its borrowing limit, say."""
        usage, queue = self.snapshot.cache.usage, candidate.admitted.queue
        held = candidate.admitted.assignment.usage
        return any(
            held.get(flavor, 0) and usage.reaches(queue, flavor, binding)
            for flavor, binding in self._limits.items()
        )

    def _extra(self, scope: Scope, units: int) -> list[Candidate]:
        """The cheapest workloads' candidates outside a node or domain scope that join its search while
        quota is short (decision 31), in victim order; none otherwise."""
        if not self.quota_short or (scope.node is None and scope.level_no is None):
            return []
        room = QUOTA_EXTRA if units > EXACT_WORKLOADS else min(QUOTA_EXTRA, EXACT_WORKLOADS - units)
        if room <= 0:
            return []
        return self.outside({c.name for c in scope.candidates}, room)

    def _within(self) -> bool:
        """Whether the preemptor, admitted on the usage as it is now, would not borrow."""
        return self.snapshot.cache.usage.guarantor(self.preemptor.queue, self.assignment.usage) is not None

    def _bound_within(self, victims: Iterable[Candidate]) -> bool:
        """Whether a set must leave the preemptor within nominal: every set when `strict` (decision 37),
        else one that reclaims under decision 29's condition."""
        return self.conditional and (self.strict or any(c.cause == RECLAIM for c in victims))

    def _set_ok(self, victims: Sequence[Candidate]) -> bool:
        """With `victims` applied: decision 29's (or 37's) condition on the set."""
        return not self._bound_within(victims) or self._within()

    def _checked(self, victims: list[Candidate] | None) -> bool:
        """Whether a set found without decision 29's condition meets it (applied, then rolled back)."""
        if victims is None or not self._bound_within(victims):
            return True
        snapshot = self.snapshot
        mark = snapshot.mark()
        for candidate in victims:
            apply_if_held(snapshot, candidate)
        ok = self._within()
        snapshot.rollback(mark)
        return ok

    def _greedy(
        self, candidates: Sequence[Candidate], allowed: Callable[[Candidate], bool] | None = None
    ) -> list[Candidate] | None:
        """Kueue's greedy set. Under decision 29's condition (a preemptor that borrows now, searched
        with reclaim candidates only because its own queue's gave no set) own-queue candidates are given
        up first, and a set that still does not meet the condition is none."""
        snapshot, fits, flavors = self.snapshot, self.fits, self.flavors
        allowed = self._still_borrowing(allowed)
        if self.strict:
            # Kueue's run without borrowing: candidates in victim order (other queues first), given up
            # until the preemptor fits within its nominal quota (quota arithmetic first: placing is
            # dearer, and until the own victims are given up it is not within nominal).
            return greedy_set(snapshot, candidates, lambda: self._within() and fits(), flavors, allowed)
        if not self.conditional:
            return greedy_set(snapshot, candidates, fits, flavors, allowed)
        own = [c for c in candidates if c.cause == WITHIN_QUEUE]
        others = [c for c in candidates if c.cause != WITHIN_QUEUE]
        found = greedy_set(snapshot, own + others, fits, flavors, allowed)
        return found if self._checked(found) else None

    def _still_borrowing(self, allowed: Callable[[Candidate], bool] | None) -> Callable[[Candidate], bool]:
        """`allowed`, and for another queue's candidate, as Kueue checks it at each step, that the queues
        above its own up to where it meets the preemptor's still borrow (decision 38; the greedy search
        checks the queue itself); in a tree one level deep it always holds."""
        snapshot, mine, flavors = self.snapshot, self.preemptor.queue, self.flavors

        def test(candidate: Candidate) -> bool:
            if allowed is not None and not allowed(candidate):
                return False
            return candidate.cause == WITHIN_QUEUE or subtree_borrows(
                snapshot, candidate.admitted.queue, mine, flavors
            )

        return test

    def scope(self, scope: Scope) -> VictimSet | None:
        """The cheapest set of the scope: exact over its minimal sets while it is small, else greedy."""
        units = self._units(scope.candidates)
        candidates = scope.candidates
        extra = self._extra(scope, len(units))
        if extra:
            # The scope's own workloads first, then those outside it: these free no room there, so the
            # walk looks at them only after sets of the scope's own that free room but not quota (every
            # minimal set is still a leaf of the walk, whatever the order).
            units = units + self._units(extra)
            candidates = sorted([*candidates, *extra], key=order_of)
        if self.strict and not self._own_may_bring_within(candidates):
            return None  # decision 37: not even every own candidate here brings it within nominal
        if len(units) <= EXACT_WORKLOADS:
            found = self._exact(scope, units)
            if found is not None:
                return VictimSet(self.preemptor.name, tuple(found))
        greedy = self._greedy(candidates)
        if greedy is not None and not self.keeps_nominal(greedy):
            # Decision 8: a set that keeps every other queue at nominal first, if the scope has one.
            greedy = self._greedy(candidates, self._leaves_queue_at_nominal) or greedy
        return None if greedy is None else VictimSet(self.preemptor.name, tuple(self._trim(greedy)))

    def _leaves_queue_at_nominal(self, candidate: Candidate) -> bool:
        """Whether giving up `candidate` now leaves its queue at or above its nominal quota."""
        if candidate.cause == WITHIN_QUEUE:
            return True
        cache = self.snapshot.cache
        current = cache.admitted.get(candidate.name)
        if current is None:
            return False
        held = current.assignment.usage
        if candidate.kind == "evict":
            amounts: Mapping[str, int] = held
        else:
            left = usage_of(current.workload, current.assignment.model, candidate.counts)
            amounts = {f: amount - left.get(f, 0) for f, amount in held.items()}
        return all(
            cache.usage.usage(queue, f) - amounts.get(f, 0) >= cache.tree.nominal(queue, f)
            for queue in self._judged(candidate.admitted.queue)
            for f in self.flavors
            if amounts.get(f, 0)
        )

    def _trim(self, victims: list[Candidate]) -> list[Candidate]:
        """A greedy set's shrinks cut to the fewest pods with which the preemptor still fits (the greedy
        search shrinks elastic victims to their minimum): each by a binary search over its steps."""
        out = list(victims)
        evicted = {c.name for c in victims if c.kind == "evict"}
        for i, candidate in enumerate(victims):
            if candidate.kind != "shrink" or candidate.name in evicted:
                continue
            steps = self.options.shrink_steps(candidate)
            if steps[-1] is not candidate:
                continue  # already a partial shrink
            low, high = -1, len(steps) - 1  # steps[high] fits (the greedy found it), steps[low] not known
            while high - low > 1:
                mid = (low + high) // 2
                if self._fits_with([*out[:i], steps[mid], *out[i + 1 :]]):
                    high = mid
                else:
                    low = mid
            out[i] = steps[high]
        return out

    def _fits_with(self, victims: Sequence[Candidate]) -> bool:
        snapshot = self.snapshot
        mark = snapshot.mark()
        for candidate in victims:
            apply_if_held(snapshot, candidate)
        ok = self.fits() and self._set_ok(victims)
        snapshot.rollback(mark)
        return ok

    def _units(self, scoped: Sequence[Candidate]) -> list[list[Option]]:
        """Per workload of the scope, its options: shrink by one pod, two, ... (elastic), evict whole."""
        by_name: dict[str, list[Option]] = {}
        for candidate in scoped:
            options = by_name.setdefault(candidate.name, [])
            if candidate.kind == "shrink":
                options[:0] = [self.options.option(c) for c in self.options.shrink_steps(candidate)]
            else:
                options.append(self.options.option(candidate))
        return sorted(by_name.values(), key=lambda options: order_of(options[0].candidate))

    def _exact(self, scope: Scope, units: list[list[Option]]) -> list[Candidate] | None:
        """The cheapest of the scope's minimal sets that pass quota and the capacity bound and then fit,
        or None when there is none, or the scope is too large to search (the caller goes greedy).

        A depth-first walk over the workloads (each: untouched, or one of its options) that stops a
        branch as soon as its set passes the checks (a larger set only costs more) or can no longer
        free enough GPUs. The sets found are then placed cheapest first."""
        snapshot = self.snapshot
        usage = snapshot.cache.usage
        version = usage.version
        capacity = Capacity.of(self.options, scope, units)
        queue, wanted = self.preemptor.queue, self.assignment.usage
        leaves: list[tuple[SetRank, list[Candidate]]] = []
        chosen: list[Option] = []
        steps = 0

        def visit(i: int) -> bool:
            """False when the step budget ran out."""
            nonlocal steps
            steps += 1
            if steps > EXACT_STEPS:
                return False
            if (
                chosen
                and capacity.enough()
                and usage.fits(queue, wanted) is None
                and (not self._bound_within(o.candidate for o in chosen) or self._within())
            ):
                allowed = self._allowed(chosen)
                if allowed is not None:
                    victims = [option.candidate for option in chosen]
                    leaves.append(
                        (SetRank(allowed, VictimSet(self.preemptor.name, tuple(victims)).cost()), victims)
                    )
                return True
            if i == len(units) or not capacity.reachable(i):
                return True
            if not visit(i + 1):
                return False
            for option in units[i]:
                chosen.append(option)
                usage.add(option.candidate.admitted.queue, option.amounts, -1)
                capacity.take(option, 1)
                ok = visit(i + 1)
                capacity.take(option, -1)
                usage.add(option.candidate.admitted.queue, option.amounts, 1)
                chosen.pop()
                if not ok:
                    return False
            return True

        complete = visit(0)
        if steps > 1:
            usage.rewind(version)  # every change was undone: memos keyed by the version hold again
        if not complete:
            return None
        leaves.sort(key=_leaf_key)
        for _, victims in leaves[:EXACT_TRIES]:
            mark = snapshot.mark()
            for candidate in victims:
                apply_candidate(snapshot, candidate)
            ok = self.fits()
            snapshot.rollback(mark)
            if ok:
                return victims
        return None

    def _allowed(self, chosen: Sequence[Option]) -> int | None:
        """With `chosen` refunded from the usage table: 0 when no other queue ends below its nominal
        quota, 1 when one does only by its last workload taken (it borrowed until then: a gang cannot be
        split), None when the set takes more from a queue than that."""
        cache = self.snapshot.cache
        usage, tree = cache.usage, cache.tree
        worst = 0
        largest: dict[tuple[str, str], int] = {}
        for option in chosen:
            if option.candidate.cause == WITHIN_QUEUE:
                continue
            # Decision 38: the queue and the queues above it up to where it meets the preemptor's, each
            # against its own subtree quota (a leaf's amount stands for what is charged above it).
            for q in self._judged(option.candidate.admitted.queue):
                for flavor in self.flavors:
                    amount = option.amounts.get(flavor, 0)
                    if amount > largest.get((q, flavor), 0):
                        largest[(q, flavor)] = amount
        for (q, flavor), amount in largest.items():
            left, nominal = usage.usage(q, flavor), tree.nominal(q, flavor)
            if left >= nominal:
                continue
            if left + amount <= nominal:
                return None
            worst = 1
        return worst

    def keeps_nominal(self, victims: Sequence[Candidate]) -> bool:
        """Whether taking `victims` leaves every other queue at or above its nominal quota."""
        return keeps_nominal(self.snapshot, self.options, victims)

    def _judged(self, queue: str) -> tuple[str, ...]:
        """`judged_path` of a victim's queue, per search."""
        found = self._paths.get(queue)
        if found is None:
            found = self._paths[queue] = judged_path(self.snapshot, queue, self.preemptor.queue)
        return found


def keeps_nominal(snapshot: Snapshot, options: Options, victims: Sequence[Candidate]) -> bool:
    """Whether taking `victims` (on the snapshot as it is) leaves every other queue at or above its
    nominal quota in the preemptor's flavors."""
    cache = snapshot.cache
    taken: dict[tuple[str, str], int] = {}
    mine = options.preemptor.queue
    for candidate in victims:
        if candidate.cause == WITHIN_QUEUE:
            continue
        amounts = options.option(candidate).amounts
        for queue in judged_path(snapshot, candidate.admitted.queue, mine):  # decision 38
            for flavor in options.flavors:
                amount = amounts.get(flavor, 0)
                if amount:
                    key = (queue, flavor)
                    taken[key] = taken.get(key, 0) + amount
    return all(
        cache.usage.usage(q, flavor) - amount >= cache.tree.nominal(q, flavor)
        for (q, flavor), amount in taken.items()
    )


def _leaf_key(leaf: tuple[SetRank, list[Candidate]]) -> SetRank:
    return leaf[0]
