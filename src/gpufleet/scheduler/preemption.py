"""Preemption: which admitted workloads to evict (or shrink) so that a pending one can start.

Steps (ARCHITECTURE.md, Scheduling cycle step 4):
1. candidates: workloads the preemptor's queue policy allows it to evict (`withinQueue`,
   `reclaimWithinCohort` when it would stay within its nominal quota, `borrowWithinCohort` when it
   would borrow); never a non-preemptible one, never one inside its queue's `minRuntimeSeconds`, never
   one in another tree; from another queue only while that queue borrows (so a queue within its
   nominal quota is never a reclaim target);
2. scopes: a workload that requires a topology domain is tried domain by domain (the candidates with
   pods in that domain), so victims free one domain rather than scattered capacity; a one-pod workload
   is tried node by node; any other workload over the whole fleet (node scopes are bounded from the
   queues' kept candidates grouped per node, and built only when the search comes to them);
3. in each scope, the cheapest sufficient set (`VictimSet.cost`): while the scope holds few workloads,
   an exact search over its minimal sets that pass quota and a free-GPU bound, each workload untouched,
   shrunk by 1, 2, ... pods (elastic: only the pods the preemptor needs) or evicted, the sets then
   placed cheapest first; beyond that bound, candidates are given up in `victim_order` until the
   preemptor fits, then those not needed are added back in reverse order (Kueue's minimal set), again
   with only candidates that keep their queue at nominal if that set does not, and its shrinks cut to
   the pods needed;
4. a set that leaves every other queue at or above its nominal quota beats any that does not; one
   that does not is allowed only when a queue loses its last borrowing workload whole (a gang cannot
   be split); then the cheapest set over all scopes wins.

Everything is tried on the snapshot and rolled back; the caller re-applies the chosen set. A preemption
is proposed only when the preemptor then fits: no loops of evictions that admit nobody.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.request import GpuKind
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import Admitted, Snapshot
from gpufleet.scheduler.flavors import Assignment, split_flavor, usage_of
from gpufleet.scheduler.queueing import QueueSettings
from gpufleet.scheduler.workload import Workload

RECLAIM = "Reclaim"
WITHIN_QUEUE = "WithinQueue"
BORROW = "BorrowWithinCohort"

Kind = Literal["shrink", "evict"]
IntArray = npt.NDArray[np.int64]
Key = tuple[int, int, float, int, float, int, tuple[str, ...]]
"""`VictimSet.cost`."""


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
    order: tuple[int, int, float, int, float, str] | None = None
    """`victim_order` of it as timed (set with its lost work, so sorting does not compute it again)."""

    @property
    def name(self) -> str:
        return self.admitted.name

    @property
    def priority(self) -> int:
        return self.admitted.workload.priority


def victim_order(candidate: Candidate) -> tuple[int, int, float, int, float, str]:
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

    def cost(self) -> Key:
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
        return (
            1 if any(c.kind == "evict" for c in victims) else 0,
            1 if any(c.cause == WITHIN_QUEUE for c in victims) else 0,
            sum(c.lost_gpu_seconds for c in victims),
            max((c.priority for c in victims), default=-(1 << 62)),
            -oldest,
            len(victims),
            tuple(sorted(c.name for c in victims)),
        )


def _admitted_at(candidate: Candidate) -> float:
    admitted_at = candidate.admitted.workload.admitted_at
    return admitted_at if admitted_at is not None else 0.0


Fits = Callable[[], bool]


def _cause(*, victim: Admitted, preemptor: Workload, settings: QueueSettings, borrowing: bool) -> str | None:
    """Why `preemptor` may evict `victim` under its queue's policy, or None when it may not."""
    policy = settings.preemption
    vp, pp = victim.workload.priority, preemptor.priority
    if victim.queue == preemptor.queue:
        if policy.within_queue == "LowerPriority" and vp < pp:
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
    `victim_order` (a `_Pool`: the queues' kept lists, merged only as far as the search reads them)."""
    cache = snapshot.cache
    tree = cache.tree
    own_settings = cache.settings[preemptor.queue]
    root = tree.root_of(preemptor.queue)
    borrowing = _is_borrowing(snapshot, preemptor, assignment)
    flavors = set(assignment.usage)
    parts: list[_Part] = []
    queues = []
    if own_settings.preemption.within_queue != "Never":
        queues.append(preemptor.queue)
    if _reaches_others(own_settings, borrowing):
        queues.extend(q for q in _borrowing_queues(snapshot, root, flavors) if q != preemptor.queue)
    reclaim_any = own_settings.preemption.reclaim_within_cohort == "Any"
    held = cache.admitted.get(preemptor.name)
    charges = cache.charges
    # Per cycle, the queues whose kept part every preemptor of this tree and flavors takes whole, as
    # (charge count, part, its stamp) when found so: at the same count and stamp, taken again at once.
    whole = _whole_parts(snapshot, root, flavors, now)
    for queue in queues:
        kind = WITHIN_QUEUE if queue == preemptor.queue else BORROW if borrowing else RECLAIM
        # Reclaim with `Any` takes every workload of a borrowing queue: no per-victim rule to check.
        every = kind == RECLAIM and reclaim_any
        if every and (held is None or held.queue != queue):
            known = whole.get(queue)
            if known is not None and known[0] == charges.get(queue, 0) and known[1].stamp == known[2]:
                if known[1].kept:
                    parts.append(known[1])
                continue
        kept, part = _queue_candidates(snapshot, queue, kind, now=now)
        if (
            part is not None
            and every
            and (held is None or held.queue != queue)
            and (not flavors or part.meets(flavors))
        ):
            whole[queue] = (charges.get(queue, 0), part, part.stamp)
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
                victim=admitted, preemptor=preemptor, settings=own_settings, borrowing=borrowing
            ):
                out.append(candidate)
        if out:
            parts.append(_Part(out))
    return _Pool(parts)


def _whole_parts(
    snapshot: Snapshot, root: str, flavors: set[str], now: float
) -> dict[str, tuple[int, _Part, int]]:
    """`candidates`' per-cycle memo of the queues' parts taken whole (see there)."""
    key = ("whole", root, frozenset(flavors), now)
    found = snapshot.memo.get(key)
    if not isinstance(found, dict):
        found = snapshot.memo[key] = {}
    return found


def _order(candidate: Candidate) -> tuple[int, int, float, int, float, str]:
    order = candidate.order
    return order if order is not None else victim_order(candidate)


@dataclass(slots=True)
class _Borrowers:
    """`_borrowing_queues`' memo for one tree and set of flavors: the answer at a usage version, and per
    queue looked at, (its charge count, whether it borrowed then)."""

    version: int
    queues: list[str]
    seen: dict[str, tuple[int, bool]]


def _borrowing_queues(snapshot: Snapshot, root: str, flavors: set[str]) -> list[str]:
    """The queues of the tree under `root` with admitted workloads that borrow one of `flavors`.

    Memo for the cycle: every preemptor of a cycle scans the same tree, and usage (so who borrows, and
    who has members) changes only between some of them, and then for a few queues. A queue without
    child queues changes its usage only when it is charged or refunded (`ClusterCache.charges`, never
    undone), so at the same charge count its answer stands; a queue with children is looked at again."""
    cache = snapshot.cache
    usage = cache.usage
    key = ("borrowing", root, frozenset(flavors))
    found = snapshot.memo.get(key)
    if isinstance(found, _Borrowers) and found.version == usage.version:
        return list(found.queues)
    tree = cache.tree
    children, charges = tree.children, cache.charges
    # Updated in place: an entry of a queue without members now is passed over, and looked at again
    # when it has members (a charge, so another count).
    seen: dict[str, tuple[int, bool]] = found.seen if isinstance(found, _Borrowers) else {}
    queues = []
    for name, members in cache.by_queue.items():
        if not members:
            continue
        count = charges.get(name, 0)
        last = seen.get(name)
        if last is not None and last[0] == count and not children.get(name):
            borrows = last[1]
        else:
            borrows = tree.root_of(name) == root and _borrows(snapshot, name, flavors)
            seen[name] = (count, borrows)
        if borrows:
            queues.append(name)
    snapshot.memo[key] = _Borrowers(usage.version, queues, seen)
    return list(queues)


def _is_borrowing(snapshot: Snapshot, preemptor: Workload, assignment: Assignment) -> bool:
    cache = snapshot.cache
    return any(
        cache.usage.usage(preemptor.queue, flavor) + amount > cache.tree.nominal(preemptor.queue, flavor)
        for flavor, amount in assignment.usage.items()
    )


def _reaches_others(settings: QueueSettings, borrowing: bool) -> bool:
    policy = settings.preemption
    if borrowing:
        return policy.borrow_within_cohort != "Never"
    return policy.reclaim_within_cohort != "Never"


def reaches_other_queues(snapshot: Snapshot, preemptor: Workload, assignment: Assignment) -> bool:
    """Whether the preemptor's policy lets it take from queues other than its own right now."""
    borrowing = _is_borrowing(snapshot, preemptor, assignment)
    return _reaches_others(snapshot.cache.settings[preemptor.queue], borrowing)


_Bound = tuple[int, Key]
"""A lower bound of a set's (keeps every other queue at nominal 0/1, `VictimSet.cost`)."""
_Least = tuple[int, int, float, int, float, tuple[str]]
"""Some candidates' `victim_order`, part by part at its least (a shrink counted with no lost work; the
name as a 1-tuple): what `_quick_bound` makes of them, flat."""
_Entry = tuple[
    int, int, int, float, int, float, int, tuple[str, ...], int, int, "_Scope | _Part | list[_Part]"
]
"""A scope in the search's heap: its bound flattened (`_flat`), whether the bound is the tight one, its
index (a node scope: the node), and the scope (a node scope not built yet: the parts with candidates
there)."""


class _Part:
    """One queue's candidates as preemptors take them whole: in victim order, and grouped per node for
    the node-by-node search. Kept with the queue's candidate list: the groups for as long as the list
    holds, the order and the per-node least orders until the list is re-timed (`retimed`)."""

    __slots__ = (
        "_evicts",
        "_first",
        "_flavors",
        "_least",
        "_milli",
        "_ordered",
        "groups",
        "held",
        "kept",
        "shared",
        "stamp",
    )

    def __init__(self, kept: list[Candidate], *, shared: bool = False) -> None:
        self.kept = kept
        self.shared = shared
        """Kept with its queue's list (the same object for every preemptor while the list holds), not
        built for one preemptor."""
        self.stamp = 0
        """Counts re-timings: a node index that saw this part at another stamp saw other least orders."""
        groups, held = _by_node(kept)
        self.groups = groups
        """Per node the candidates touch: those candidates (in the kept list's order)."""
        self.held = held
        """Per node: the whole GPUs the evict candidates hold there."""
        self._ordered: list[Candidate] | None = None
        self._first: Candidate | None = None
        self._least: dict[int, _Least] | None = None
        self._milli: dict[str, int] = {}
        self._evicts: bool | None = None
        self._flavors: set[frozenset[str]] | None = None

    def retimed(self) -> None:
        """The candidates' lost work changed: their order and least orders are computed again."""
        self._ordered = None
        self._first = None
        self._least = None
        self.stamp += 1

    @property
    def ordered(self) -> list[Candidate]:
        found = self._ordered
        if found is None:
            found = self._ordered = sorted(self.kept, key=_order)
        return found

    @property
    def first(self) -> Candidate:
        """`ordered[0]`, without sorting when the order is not known yet (a search mostly reads no more
        of a part than its first)."""
        if self._ordered is not None:
            return self._ordered[0]
        found = self._first
        if found is None:
            found = self._first = min(self.kept, key=_order)
        return found

    def meets(self, flavors: set[str]) -> bool:
        """Whether every candidate holds one of `flavors` (the flavor filter leaves none out)."""
        held = self._flavors
        if held is None:
            held = self._flavors = {frozenset(c.admitted.assignment.usage) for c in self.kept}
        return all(not flavors.isdisjoint(f) for f in held)

    def milli(self, flavor: str) -> int:
        """The milli-GPU of `flavor` its evict candidates hold."""
        found = self._milli.get(flavor)
        if found is None:
            found = self._milli[flavor] = sum(
                c.admitted.assignment.usage.get(flavor, 0) for c in self.kept if c.kind == "evict"
            )
        return found

    @property
    def evicts_only(self) -> bool:
        """Whether every candidate is an evict from another queue (no shrink, nothing within the queue)."""
        found = self._evicts
        if found is None:
            found = self._evicts = all(c.kind == "evict" and c.cause != WITHIN_QUEUE for c in self.kept)
        return found

    def least(self) -> dict[int, _Least]:
        """Per node: `_Least` of this queue's candidates there."""
        found = self._least
        if found is None:
            found = self._least = {node: _least(group) for node, group in self.groups.items()}
        return found


def _least(scoped: Sequence[Candidate]) -> _Least:
    """`_quick_bound`'s parts of `scoped`, flat."""
    evicts, own, lost, priority, newest, first = _order(scoped[0])
    if scoped[0].kind == "shrink":
        lost = 0.0
    for candidate in scoped[1:]:
        order = _order(candidate)
        if order[0] < evicts:
            evicts = order[0]
        if order[1] < own:
            own = order[1]
        spent = 0.0 if candidate.kind == "shrink" else order[2]
        if spent < lost:
            lost = spent
        if order[3] < priority:
            priority = order[3]
        if order[4] < newest:
            newest = order[4]
        if order[5] < first:
            first = order[5]
    return evicts, own, lost, priority, newest, (first,)


_SCANS = 4
"""Candidates `_Pool.in_order` finds by a scan of the parts' heads before it merges by a heap."""


class _Pool(Sequence[Candidate]):
    """A preemptor's candidates in `victim_order`: the parts (one per queue, each in that order) merged
    only when read whole; `_quota_feasible` reads a prefix and the node-by-node search the parts'
    groups, so most searches never sort the whole pool."""

    def __init__(self, parts: list[_Part]) -> None:
        self.parts = parts
        self._size = sum(len(part.kept) for part in parts)
        self._items: list[Candidate] | None = None

    def items(self) -> list[Candidate]:
        found = self._items
        if found is None:
            # The order's last part is the name: no two candidates tie, so the merge is the one order.
            found = self._items = sorted(
                itertools.chain.from_iterable(p.ordered for p in self.parts), key=_order
            )
        return found

    def in_order(self) -> Iterator[Candidate]:
        """The candidates in order, merged lazily (a reader that stops early sorts nothing)."""
        if self._items is not None:
            return iter(self._items)
        if len(self.parts) == 1:
            return iter(self.parts[0].ordered)
        return self._merged()

    def _merged(self) -> Iterator[Candidate]:
        """The parts merged: the first few by scanning the parts' heads (`_quota_feasible` mostly stops
        after the first evict, and a heap over hundreds of parts costs more to set up than a scan; a
        part is sorted only once its first is taken), the rest by a heap."""
        parts = self.parts
        heads: list[Candidate | None] = [part.first for part in parts]
        taken = [0] * len(parts)
        for _ in range(_SCANS):
            least: tuple[int, int, float, int, float, str] | None = None
            where = -1
            for j, head in enumerate(heads):
                if head is not None:
                    key = _order(head)
                    if least is None or key < least:
                        least, where = key, j
            if least is None:
                return
            found = heads[where]
            assert found is not None
            yield found
            taken[where] += 1
            ordered = parts[where].ordered
            heads[where] = ordered[taken[where]] if taken[where] < len(ordered) else None
        yield from heapq.merge(*(part.ordered[taken[j] :] for j, part in enumerate(parts)), key=_order)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.items())

    @overload
    def __getitem__(self, index: int) -> Candidate: ...
    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...
    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        return self.items()[index]


@dataclass(slots=True)
class _QueueCandidates:
    """One queue's candidates for one cause, as last computed, and what they were computed from."""

    token: tuple[object, ...]
    members: tuple[tuple[str, Admitted, Workload, Assignment], ...]
    candidates: list[Candidate]
    """Every preemptible member not admitted in the cycle that computed them, minimum runtime or not."""
    removed: tuple[int | None, ...]
    """Per candidate, the milli-GPU it gives up (None: all of its workload's)."""
    now: float
    """The time the candidates' lost work is computed for (NaN: not yet)."""
    checked: tuple[int, int] = (-1, -1)
    """(snapshot serial, the queue's charge count) of the last check that found the members unchanged."""
    part: _Part | None = None
    """The candidates in victim order and grouped per node, as timed at `now` (built on first use)."""

    def holds(self, snapshot: Snapshot, queue: str, token: tuple[object, ...]) -> bool:
        """Whether the queue still has exactly these members, unchanged (the same objects).

        Inside a cycle every change of members charges or refunds the queue (`ClusterCache.charges`),
        so a check at the same count in the same cycle stands; the world may replace a workload between
        cycles (a checkpoint) without one, so each cycle checks once in full."""
        cache = snapshot.cache
        if token != self.token:
            return False
        checked = (snapshot.serial, cache.charges.get(queue, 0))
        if checked == self.checked:
            return True
        if len(cache.by_queue.get(queue, ())) != len(self.members):
            return False
        admitted = cache.admitted
        for name, held, workload, assignment in self.members:
            now = admitted.get(name)
            if now is not held or now.workload is not workload or now.assignment is not assignment:
                return False
        self.checked = checked
        return True


def _queue_candidates(
    snapshot: Snapshot, queue: str, cause: str, *, now: float
) -> tuple[list[Candidate], _Part | None]:
    """A queue's workloads that any preemptor may take from (preemptible, past the minimum runtime,
    not admitted in this cycle) as `cause` candidates, and, when that is the whole kept list, its
    `_Part` (sorted and grouped per node once for every preemptor that takes the list whole).

    Kept on the cache across cycles (every preemptor of a tree looks at the same borrowing queues, cycle
    after cycle): reused while the queue's members are the same objects (an admission, eviction, shrink
    or checkpoint replaces one), its settings and the fleet's nodes unchanged; only the lost work, which
    depends on the time, is computed again when the time moved (and the part built again).
    """
    cache = snapshot.cache
    key = (queue, cause)
    settings = cache.settings[queue]
    found = cache.candidate_lists.get(key)
    # Found unchanged in this cycle at this charge count: it holds (settings, the fleet's nodes and the
    # queue's epoch change only between cycles), so not even the token is built.
    if not (
        isinstance(found, _QueueCandidates)
        and found.checked == (snapshot.serial, cache.charges.get(queue, 0))
    ):
        token = (cache.queue_epochs.get(queue, 0), cache.fleet.generation, settings)
        if not (isinstance(found, _QueueCandidates) and found.holds(snapshot, queue, token)):
            found = _compute(snapshot, queue, cause, token)
            cache.candidate_lists[key] = found
    if found.now != now:
        for candidate, removed in zip(found.candidates, found.removed, strict=True):
            candidate.lost_gpu_seconds = candidate.admitted.lost_gpu_seconds(now, removed)
            candidate.order = victim_order(candidate)
        found.now = now
        if found.part is not None:
            found.part.retimed()
    min_runtime = settings.min_runtime_seconds
    if min_runtime <= 0:
        if found.part is None:
            found.part = _Part(found.candidates, shared=True)
        return found.candidates, found.part
    return [c for c in found.candidates if now - _started(c.admitted, now) >= min_runtime], None


def _started(admitted: Admitted, now: float) -> float:
    started = admitted.workload.admitted_at
    return started if started is not None else now


def _compute(snapshot: Snapshot, queue: str, cause: str, token: tuple[object, ...]) -> _QueueCandidates:
    """The queue's members as they are now and the candidates they give (timed by the caller)."""
    cache = snapshot.cache
    members = []
    out: list[Candidate] = []
    removed: list[int | None] = []
    for name in cache.by_queue.get(queue, ()):
        admitted = cache.admitted[name]
        workload = admitted.workload
        members.append((name, admitted, workload, admitted.assignment))
        if not workload.preemptible or name in snapshot.assumed:
            continue
        shrink = _shrink_of(admitted) if _elastic(workload) else None
        if shrink is not None:
            pods, counts = shrink
            rows = tuple(dict.fromkeys(admitted.pods[pod].node for pod in pods))
            out.append(Candidate(admitted, "shrink", cause, 0.0, pods, counts, rows))
            removed.append(admitted.assignment.gpu_milli - _milli_at(admitted, counts))
        gpus: dict[int, int] = {}
        for alloc in admitted.pods.values():
            gpus[alloc.node] = gpus.get(alloc.node, 0) + len(alloc.gpus)
        out.append(Candidate(admitted, "evict", cause, 0.0, (), (), tuple(gpus), tuple(gpus.values())))
        removed.append(None)
    return _QueueCandidates(token, tuple(members), out, tuple(removed), float("nan"))


def _elastic(workload: Workload) -> bool:
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in workload.pod_sets)


def _borrows(snapshot: Snapshot, queue: str, flavors: Iterable[str]) -> bool:
    usage = snapshot.cache.usage
    return any(usage.borrowed(queue, flavor) > 0 for flavor in flavors)


def _milli_at(admitted: Admitted, counts: Sequence[int]) -> int:
    from gpufleet.scheduler.flavors import usage_of

    return sum(usage_of(admitted.workload, admitted.assignment.model, counts).values())


def _shrink_of(admitted: Admitted) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """The pods beyond each pod set's minimum (highest indices go first) and the counts left."""
    workload = admitted.workload
    pods: list[str] = []
    counts: list[int] = []
    for pod_set, count in zip(workload.pod_sets, admitted.assignment.counts, strict=True):
        keep = min(count, pod_set.minimum)
        held = sorted(
            (pod for pod in admitted.pods if pod.startswith(f"{workload.name}/{pod_set.name}/")),
            key=lambda pod: int(pod.rpartition("/")[2]),
        )
        pods.extend(held[keep:])
        counts.append(keep)
    return (tuple(pods), tuple(counts)) if pods else None


def _apply(snapshot: Snapshot, candidate: Candidate) -> None:
    if candidate.kind == "shrink":
        snapshot.shrink(candidate.name, list(candidate.pods), candidate.counts)
    else:
        snapshot.remove(candidate.name)


def _still_applicable(snapshot: Snapshot, candidate: Candidate, flavors: set[str], removed: set[str]) -> bool:
    if candidate.name in removed:
        return False
    if candidate.kind == "evict" and candidate.name not in snapshot.cache.admitted:
        return False
    return candidate.cause == WITHIN_QUEUE or _borrows(snapshot, candidate.admitted.queue, flavors)


def _greedy(
    snapshot: Snapshot,
    ordered: Sequence[Candidate],
    fits: Fits,
    flavors: set[str],
    allowed: Callable[[Candidate], bool] | None = None,
) -> list[Candidate] | None:
    """Gives up candidates in order until `fits`, then adds back the unneeded; rolls everything back.
    `allowed`: a further test of each candidate, on the snapshot with those before it given up."""
    start = snapshot.mark()
    taken: list[Candidate] = []
    removed: set[str] = set()
    found = False
    for candidate in ordered:
        if not _still_applicable(snapshot, candidate, flavors, removed):
            continue
        if allowed is not None and not allowed(candidate):
            continue
        if candidate.kind == "evict" and any(c.name == candidate.name for c in taken):
            # Evicting a workload already shrunk here: undo nothing, evict what is left of it.
            pass
        _apply(snapshot, candidate)
        if candidate.kind == "evict":
            removed.add(candidate.name)
        taken.append(candidate)
        if fits():
            found = True
            break
    snapshot.rollback(start)
    if not found:
        return None
    return _minimal(snapshot, taken, fits)


def _minimal(snapshot: Snapshot, taken: list[Candidate], fits: Fits) -> list[Candidate]:
    """Drops every candidate the preemptor does not need, trying the most expensive first."""
    needed = list(taken)
    for candidate in reversed(taken[:-1]):
        trial = [c for c in needed if c is not candidate]
        # A shrink of a workload that is evicted anyway adds nothing; an evict without its shrink works.
        start = snapshot.mark()
        for c in trial:
            if c.kind == "evict" or c.name in snapshot.cache.admitted:
                _apply_if_held(snapshot, c)
        ok = fits()
        snapshot.rollback(start)
        if ok:
            needed = trial
    return needed


def _apply_if_held(snapshot: Snapshot, candidate: Candidate) -> None:
    admitted = snapshot.cache.admitted.get(candidate.name)
    if admitted is None:
        return
    if candidate.kind == "shrink":
        if all(pod in admitted.pods for pod in candidate.pods):
            snapshot.shrink(candidate.name, list(candidate.pods), candidate.counts)
    else:
        snapshot.remove(candidate.name)


class _Scope(NamedTuple):
    """Where a preemptor is tried: one node, one domain of a topology level, or the whole fleet (a
    tuple: thousands are made per search, one per node)."""

    candidates: list[Candidate]
    node: int | None = None
    level_no: int | None = None
    domain: int | None = None

    def rows(self, fleet: FleetState) -> IntArray:
        """The fleet rows the scope covers."""
        if self.node is not None:
            return np.array([self.node], dtype=np.int64)
        every = np.arange(fleet.n_rows, dtype=np.int64)
        if self.level_no is None:
            return every
        inside: IntArray = every[fleet.domain[self.level_no][: fleet.n_rows] == self.domain]
        return inside

    def covers(self, fleet: FleetState, row: int) -> bool:
        if self.node is not None:
            return row == self.node
        return self.level_no is None or int(fleet.domain[self.level_no][row]) == self.domain


def _scopes(snapshot: Snapshot, preemptor: Workload, pool: Sequence[Candidate]) -> list[_Scope]:
    """The candidate lists to try: one per domain of the required level (or per node for one pod), each
    in the pool's order."""
    fleet = snapshot.fleet
    level = _scope_level(preemptor)
    if level is None:
        return [_Scope(list(pool))]
    level_no = fleet.level_number(level) if level not in ("host", "nvlink") else None
    by_domain: dict[int, list[Candidate]] = {}
    # Per node (host and nvlink levels): whole GPUs the evict candidates hold there (a shrink frees a
    # subset of its workload's evict), for the bound below.
    held: dict[int, int] = {}
    if level_no is None:
        by_domain, held = _by_node(pool)
    else:
        domain_of = fleet.domain[level_no]
        for candidate in pool:
            domains = {int(domain_of[node]) for node in candidate.rows}
            domains.discard(-1)
            for domain in domains:
                by_domain.setdefault(domain, []).append(candidate)
    if not by_domain and level_no is None and level in ("host", "nvlink"):
        return []
    needed = _one_pod_whole_gpus(preemptor)
    if level_no is None:
        # A node whose free GPUs and its candidates' GPUs together fall short cannot be freed enough:
        # skipping it spares a search that must fail. Shared pods count a whole GPU each, so the bound
        # only ever keeps too many nodes, never too few.
        whole_free = fleet.whole_free
        return [
            _Scope(scoped, node=node)
            for node, scoped in sorted(by_domain.items())
            if needed is None or int(whole_free[node]) + held.get(node, 0) >= needed
        ]
    return [_Scope(by_domain[d], level_no=level_no, domain=d) for d in sorted(by_domain)]


def _scope_level(preemptor: Workload) -> str | None:
    """The level whose domains are the scopes (a one-pod workload: its host), or None: the whole fleet."""
    level = preemptor.topology.required
    if level is None and preemptor.min_pod_count == 1 and len(preemptor.pod_sets) == 1:
        level = "host"
    return level


def _node_heap(parts: Iterable[_Part]) -> list[_Entry]:
    """`_scopes` node by node, as heap entries, from the parts: each node's quick bound combined over the
    queues with candidates there (a least: the same as over the node's candidates together); the scope
    is built, and tested for the GPUs it can free (`_short`), only if it comes first in the search (most
    never do; a scope skipped then is one `_scopes` would have left out)."""
    least: dict[int, _Least] = {}
    where: dict[int, _Part | list[_Part]] = {}
    for part in parts:
        for node, found in part.least().items():
            have = least.get(node)
            if have is None:
                least[node] = found
                where[node] = part
            else:
                least[node] = _lesser(have, found)
                other = where[node]
                if isinstance(other, list):
                    other.append(part)
                else:
                    where[node] = [other, part]
    return [_entry(node, found, where[node]) for node, found in least.items()]


def _entry(node: int, least: _Least, parts: _Part | list[_Part]) -> _Entry:
    evicts, own, lost, priority, newest, first = least
    return (0, evicts, own, lost, priority, newest, 1, first, 0, node, parts)


class _NodeIndex:
    """The node scopes of the kept parts (`_Part.shared`) of the latest search in a cycle, in the order
    of their quick bounds: the next preemptor's pool mostly holds the same parts (the borrowing queues
    of the tree, less the few charged since), so its search updates the nodes of the parts that changed
    instead of bounding and ordering every node again. Per cycle (`Snapshot.memo`)."""

    def __init__(self) -> None:
        self.members: dict[int, tuple[_Part, int]] = {}
        """By id: the parts counted, with their stamps when counted."""
        self.where: dict[int, list[_Part]] = {}
        self.least: dict[int, _Least] = {}
        self.entries: dict[int, _Entry] = {}
        self.order: list[_Entry] = []
        """`entries` sorted: the node scopes in the order the search takes them."""
        self.searches = 0

    def update(self, shared: list[_Part]) -> None:
        """Makes the index that of `shared`: part by part when few changed, else all again."""
        now = {id(part): part for part in shared}
        members = self.members
        gone = [
            part for key, (part, stamp) in members.items() if now.get(key) is not part or part.stamp != stamp
        ]
        new = [part for key, part in now.items() if key not in members or members[key][1] != part.stamp]
        if 2 * (len(gone) + len(new)) > len(shared) + len(members):
            self._build(shared)
            return
        touched: set[int] = set()
        for part in gone:
            del members[id(part)]
            for node in part.groups:
                self.where[node].remove(part)
                touched.add(node)
        for part in new:
            members[id(part)] = (part, part.stamp)
            for node in part.groups:
                self.where.setdefault(node, []).append(part)
                touched.add(node)
        order, entries = self.order, self.entries
        for node in touched:
            old = entries.pop(node, None)
            if old is not None:
                at = bisect.bisect_left(order, old)
                assert order[at] is old
                del order[at]
            where = self.where[node]
            if not where:
                del self.where[node]
                self.least.pop(node, None)
                continue
            entry = entries[node] = _entry(node, self._least_of(node, where), where)
            bisect.insort(order, entry)

    def _build(self, shared: list[_Part]) -> None:
        self.members = {id(part): (part, part.stamp) for part in shared}
        where: dict[int, list[_Part]] = {}
        for part in shared:
            for node in part.groups:
                found = where.get(node)
                if found is None:
                    where[node] = [part]
                else:
                    found.append(part)
        self.where = where
        self.least = {}
        self.entries = {
            node: _entry(node, self._least_of(node, parts), parts) for node, parts in where.items()
        }
        self.order = sorted(self.entries.values())

    def _least_of(self, node: int, parts: list[_Part]) -> _Least:
        least = parts[0].least()[node]
        for part in parts[1:]:
            least = _lesser(least, part.least()[node])
        self.least[node] = least
        return least

    def overlay(self, own: list[_Part]) -> list[_Entry]:
        """The entries of the nodes where this preemptor's own parts (built for it) have candidates: the
        index's parts there and its own, bounded together."""
        least: dict[int, _Least] = {}
        where: dict[int, list[_Part]] = {}
        for part in own:
            for node, found in part.least().items():
                have = least.get(node)
                if have is None:
                    have = self.least.get(node)
                    where[node] = [*self.where.get(node, ()), part]
                else:
                    where[node].append(part)
                least[node] = found if have is None else _lesser(have, found)
        return [_entry(node, found, where[node]) for node, found in least.items()]


def _node_entries(snapshot: Snapshot, pool: _Pool) -> tuple[list[_Entry], list[_Entry]]:
    """The node scopes of the pool as (entries in order, a heap of more entries): the first search of a
    cycle bounds every node into the heap; later ones keep the kept parts' nodes in a `_NodeIndex` and
    put only the nodes of their own parts in the heap (those nodes are then left out of the order)."""
    index = snapshot.memo.get(_NodeIndex)
    if not isinstance(index, _NodeIndex):
        snapshot.memo[_NodeIndex] = _NodeIndex()
        return [], _node_heap(pool.parts)
    shared = [part for part in pool.parts if part.shared]
    index.update(shared)
    own = [part for part in pool.parts if not part.shared]
    return index.order, index.overlay(own) if own else []


def _short(snapshot: Snapshot, node: int, parts: _Part | list[_Part], needed: int) -> bool:
    """`_scopes`' test of a node scope, for one from the pool's parts: whether its free GPUs and its
    candidates' GPUs together fall short of `needed` (the scope is then skipped)."""
    held = parts.held.get(node, 0) if isinstance(parts, _Part) else sum(p.held.get(node, 0) for p in parts)
    return int(snapshot.fleet.whole_free[node]) + held < needed


def _lesser(a: _Least, b: _Least) -> _Least:
    """Part by part the lesser of two `_Least`: that of their candidates together."""
    return (
        a[0] if a[0] <= b[0] else b[0],
        a[1] if a[1] <= b[1] else b[1],
        a[2] if a[2] <= b[2] else b[2],
        a[3] if a[3] <= b[3] else b[3],
        a[4] if a[4] <= b[4] else b[4],
        a[5] if a[5] <= b[5] else b[5],
    )


def _flat(bound: _Bound, tight: int, i: int, scope: _Scope) -> _Entry:
    """A heap entry: the bound's parts side by side (a bound's names are always one name, so the flat
    tuple orders as the nested one), then tight, index and scope."""
    keeps, (evicts, own, lost, priority, newest, count, names) = bound
    return (keeps, evicts, own, lost, priority, newest, count, names, tight, i, scope)


def _nested(entry: _Entry) -> _Bound:
    return entry[0], (entry[1], entry[2], entry[3], entry[4], entry[5], entry[6], entry[7])


def _node_scope(node: int, parts: _Part | list[_Part]) -> _Scope:
    """A node scope from the parts with candidates there: those candidates in victim order."""
    if isinstance(parts, _Part):
        return _Scope(sorted(parts.groups[node], key=_order), node=node)
    found = [c for part in parts for c in part.groups[node]]
    return _Scope(sorted(found, key=_order), node=node)


def _one_pod_whole_gpus(preemptor: Workload) -> int | None:
    """The GPUs of a one-pod whole-GPU preemptor (None for any other shape)."""
    if len(preemptor.pod_sets) != 1 or preemptor.min_pod_count != 1:
        return None
    request = preemptor.pod_sets[0].request
    return request.gpus if request.kind is GpuKind.WHOLE else None


_EXACT_WORKLOADS = 12
"""A scope with more workloads than this is searched greedily (Kueue's minimal set), not exactly."""
_EXACT_STEPS = 2_000
"""Sets the exact search may look at in one scope before it gives up for the greedy search."""
_EXACT_TRIES = 16
"""Placements the exact search may try in one scope (its sets pass quota and a capacity bound first)."""


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
    if not pool or not _quota_feasible(snapshot, preemptor, assignment, pool):
        return None
    if not _capacity_feasible(snapshot, preemptor, assignment, pool):
        return None
    search = _Search(snapshot, preemptor, assignment, fits, now)
    best: VictimSet | None = None
    best_key: tuple[int, Key] | None = None
    # Cheapest first by a lower bound of any set a scope can give, so the search stops as soon as no
    # remaining scope can beat the best set found (a branch and bound over scopes). Two bounds: a quick
    # one from the candidates' own `victim_order` for every scope, and `_Search.scope_bound` (tighter,
    # dearer) computed only for a scope that comes first by the quick one; the heap then orders it anew.
    # Equal bounds keep the scopes' order (the index; for node scopes, the node). A node scope from the
    # pool's parts is built only when it comes first (most never do).
    # The scopes in bound order are those of `ordered` (left as they are: a later search may use them
    # again) merged with those of `heap`; a node with an entry in `heap` is passed over in `ordered`.
    ordered: list[_Entry] = []
    heap: list[_Entry]
    passed: set[int] = set()
    needed: int | None = None
    if isinstance(pool, _Pool) and _scope_level(preemptor) in ("host", "nvlink"):
        ordered, heap = _node_entries(snapshot, pool)
        passed = {entry[9] for entry in heap} if ordered else set()
        needed = _one_pod_whole_gpus(preemptor)
    else:
        heap = [
            _flat(_quick_bound(scope.candidates), 0, i, scope)
            for i, scope in enumerate(_scopes(snapshot, preemptor, pool))
        ]
    heapq.heapify(heap)
    searched = at = 0
    while searched < max_scopes:
        while at < len(ordered) and ordered[at][9] in passed:
            at += 1
        if at < len(ordered) and (not heap or ordered[at] < heap[0]):
            entry, listed = ordered[at], True
        elif heap:
            entry, listed = heap[0], False
        else:
            break
        bound = _nested(entry)
        if best_key is not None and bound >= best_key:
            break
        if listed:
            at += 1
        else:
            heapq.heappop(heap)
        i, lazy = entry[9], entry[10]
        if isinstance(lazy, _Scope):
            scope = lazy
        elif needed is not None and _short(snapshot, i, lazy, needed):
            continue
        elif not entry[0] and not entry[8] and search.below_nominal(i, lazy):
            # Its tight bound starts with 1: until a scope at nominal is ruled out, it waits with a bound
            # that low, but no lower than its tight one (and not yet tight). Scopes are searched in the
            # order of their tight bounds whatever lower bounds they wait with, so this changes nothing
            # but the tight bounds computed (most nodes of a tree that borrows little are such).
            heapq.heappush(heap, (1, 0, 0, -math.inf, -(1 << 62), -math.inf, 0, (), 0, i, lazy))
            continue
        else:
            scope = _node_scope(i, lazy)
        if not entry[8]:
            # The tight bound is at least the quick one part by part: never below it.
            heapq.heappush(heap, _flat(max(bound, search.scope_bound(scope)), 1, i, scope))
            continue
        searched += 1
        found = search.scope(scope)
        if found is None:
            continue
        key = (0 if search.keeps_nominal(found.victims) else 1, found.cost())
        if best_key is None or key < best_key:
            best, best_key = found, key
    return best


def _quick_bound(scoped: Sequence[Candidate]) -> tuple[int, Key]:
    """A lower bound of any set of `scoped`: each part of `victim_order` at its least over the
    candidates (a shrink may take one pod only: no lost work), any set possibly at nominal."""
    evicts, own, lost, priority, newest, first = _order(scoped[0])
    if scoped[0].kind == "shrink":
        lost = 0.0
    for candidate in scoped[1:]:
        order = _order(candidate)
        evicts = min(evicts, order[0])
        own = min(own, order[1])
        lost = min(lost, 0.0 if candidate.kind == "shrink" else order[2])
        priority = min(priority, order[3])
        newest = min(newest, order[4])
        first = min(first, order[5])
    return 0, (evicts, own, lost, priority, newest, 1, (first,))


@dataclass(slots=True)
class _Option:
    """One way to take from a workload in a search: a candidate, the quota it frees and the whole GPUs
    it frees per node."""

    candidate: Candidate
    amounts: dict[str, int]
    gpus: dict[int, int]


class _Search:
    """The victim search for one preemptor in one snapshot state (see `select_victims`)."""

    def __init__(
        self, snapshot: Snapshot, preemptor: Workload, assignment: Assignment, fits: Fits, now: float
    ) -> None:
        self.snapshot = snapshot
        self.preemptor = preemptor
        self.assignment = assignment
        self.fits = fits
        self.now = now
        self.flavors = set(assignment.usage)
        self.shape = _slots_shape(preemptor, assignment)
        self.code = (
            None if assignment.model is None else snapshot.fleet.model_id(split_flavor(assignment.model)[0])
        )
        self._shrinks: dict[str, list[Candidate]] = {}
        self._room_anywhere: bool | None = None
        self._infos: dict[int, list[tuple[tuple[int, int, int], float, dict[int, int], float, int]]] = {}
        """`_info` per candidate (by id: the pool's candidates live as long as the search)."""
        self._room: dict[str, dict[str, int]] = {}
        """Per other queue, how far it is above its nominal quota in each of the preemptor's flavors."""

    # ----------------------------------------------------------- bounds
    def scope_bound(self, scope: _Scope) -> tuple[int, Key]:
        """A lower bound of the cost of any set the scope's exact search can give: for a node scope of a
        whole-GPU preemptor, `_node_bound` (its sets must free enough GPUs on that node), else
        `lower_bound` (each part of the cost at its least over the scope's candidates)."""
        node, shape, code = scope.node, self.shape, self.code
        if node is not None and shape is not None and code is not None and self._capacity_bound:
            fleet = self.snapshot.fleet
            if int(fleet.model[node]) == code:
                size, needed = shape
                found = self._node_bound(scope.candidates, node, needed * size - int(fleet.whole_free[node]))
                if found is not None:
                    return found
        return self.lower_bound(scope.candidates)

    def _node_bound(self, scoped: Sequence[Candidate], node: int, deficit: int) -> tuple[int, Key] | None:
        """The cost bound of the sets that free `deficit` whole GPUs on `node`, part by part: each part
        at its least over the options left by the parts before it (a set that keeps every other queue at
        nominal uses only options that each keep their queue there; a shrink-only set only shrinks; ...),
        lost work by a knapsack over GPUs freed on the node (one option per workload, <= 8 GPUs a node).
        None when no set can free that much there (the scope is then bounded as before) or the node
        already has room (capacity is then no constraint)."""
        if deficit <= 0:
            return None
        # Per workload, its options freeing GPUs here: ((keeps nominal 0/1, evicts 0/1, own queue 0/1),
        # lost work, GPUs freed here, -admitted at, priority).
        groups: dict[int, list[tuple[tuple[int, int, int], float, int, float, int]]] = {}
        infos = self._infos
        for candidate in scoped:
            info = infos.get(id(candidate))
            if info is None:
                info = infos[id(candidate)] = self._info(candidate)
            for flags, lost, gains, newest, priority in info:
                gain = gains.get(node, 0)
                if gain > 0:
                    key = id(candidate.admitted)
                    options = groups.get(key)
                    item = (flags, lost, gain, newest, priority)
                    if options is None:
                        groups[key] = [item]
                    else:
                        options.append(item)
        pool = list(groups.values())

        def enough(part: int, value: int) -> bool:
            total = 0
            for options in pool:
                most = 0
                for o in options:
                    if o[0][part] <= value and o[2] > most:
                        most = o[2]
                total += most
                if total >= deficit:
                    return True
            return False

        if not enough(0, 1):
            return None
        bound: list[int] = []
        for part in (0, 1, 2):
            if enough(part, 0):
                bound.append(0)
                pool = [kept for options in pool if (kept := [o for o in options if o[0][part] == 0])]
            else:
                bound.append(1)
        # Least lost work over sets of the remaining options that free the deficit: best[g] = least lost
        # work freeing at least g GPUs (capped at the deficit).
        inf = float("inf")
        best = [0.0] + [inf] * deficit
        for options in pool:
            nxt = list(best)
            for option in options:
                gain, lost = option[2], option[1]
                for g in range(deficit + 1):
                    have = best[g]
                    if have != inf:
                        t = g + gain if g + gain < deficit else deficit
                        if have + lost < nxt[t]:
                            nxt[t] = have + lost
            best = nxt
        lost = best[deficit]
        lost -= 1e-9 * abs(lost)  # sums in another order may round differently: stay below
        priority = min(o[4] for options in pool for o in options)
        newest = min(o[3] for options in pool for o in options)
        # A set may also take workloads that free nothing here (for quota): names over the whole scope.
        first = min(c.name for c in scoped)
        return bound[0], (bound[1], bound[2], lost, priority, newest, 1, (first,))

    def lower_bound(self, scoped: Sequence[Candidate]) -> tuple[int, Key]:
        """No set from these candidates costs less: each part of `VictimSet.cost` at its least (the
        newest admission bounds "newer"; the first name bounds the sorted names), so scopes that tie
        on everything but names are searched only while their names could still win."""
        evicts, own, lost, priority, newest, first = _order(scoped[0])
        # A set keeps every other queue at nominal only if each of its victims alone does.
        below = 1
        for candidate in scoped:
            if below and (candidate.cause == WITHIN_QUEUE or self._keeps_alone(candidate)):
                below = 0
            # victim_order's parts are the candidate's share of each part of the cost.
            order = _order(candidate)
            if order[0] < evicts:
                evicts = order[0]
            if order[1] < own:
                own = order[1]
            spent = order[2]
            if candidate.kind == "shrink":
                # The cheapest shrink of a workload takes its first pod only.
                spent = self._shrink_steps(candidate)[0].lost_gpu_seconds
            if spent < lost:
                lost = spent
            if order[3] < priority:
                priority = order[3]
            if order[4] < newest:
                newest = order[4]
            if order[5] < first:
                first = order[5]
        return below, (evicts, own, lost, priority, newest, 1, (first,))

    @property
    def _capacity_bound(self) -> bool:
        """Whether no node of the preemptor's GPU model has room for it now: a set that lets it fit must
        then free GPUs on the node it goes to (else quota alone may be what a set frees)."""
        room = self._room_anywhere
        if room is None:
            fleet = self.snapshot.fleet
            assert self.shape is not None and self.code is not None
            size, needed = self.shape
            rows = slice(0, fleet.n_rows)
            free = fleet.whole_free[rows][fleet.model[rows] == self.code]
            room = self._room_anywhere = bool(free.size) and int(np.max(free)) >= size * needed
        return not room

    def _info(
        self, candidate: Candidate
    ) -> list[tuple[tuple[int, int, int], float, dict[int, int], float, int]]:
        """Per way of taking `candidate` (an evict; a shrink's steps): ((keeps its queue at nominal alone
        0/1, evicts 0/1, own queue 0/1), lost work, whole GPUs freed per node, -admitted at, priority)."""
        steps = self._shrink_steps(candidate) if candidate.kind == "shrink" else [candidate]
        out = []
        for step in steps:
            if step.kind == "evict":
                gains = dict(zip(step.rows, step.held, strict=True))
            else:
                gains = self._option(step).gpus
            order = _order(step)
            keeps = 0 if step.cause == WITHIN_QUEUE or self._keeps(step) else 1
            out.append(((keeps, order[0], order[1]), order[2], gains, order[4], order[3]))
        return out

    def _keeps(self, candidate: Candidate) -> bool:
        """Whether taking `candidate` (as it is: a shrink step or an evict) alone leaves its queue at or
        above its nominal quota."""
        if candidate.kind == "shrink":
            amounts: Mapping[str, int] = self._option(candidate).amounts
        else:
            amounts = candidate.admitted.assignment.usage
        room = self._room_of(candidate.admitted.queue)
        return all(amounts.get(flavor, 0) <= above for flavor, above in room.items())

    def _room_of(self, queue: str) -> dict[str, int]:
        room = self._room.get(queue)
        if room is None:
            cache = self.snapshot.cache
            room = {f: cache.usage.usage(queue, f) - cache.tree.nominal(queue, f) for f in self.flavors}
            self._room[queue] = room
        return room

    def below_nominal(self, node: int, parts: _Part | list[_Part]) -> bool:
        """Whether no candidate of these parts (kept lists of other queues) on `node` keeps its queue at
        nominal when taken alone: then every set of them pushes a queue below nominal, and the node's
        scope has a tight bound that starts with 1 (`_node_bound`, `lower_bound`). False when unsure (a
        part built for one preemptor, or with shrinks, which give up less than their workload)."""
        for part in parts if isinstance(parts, list) else (parts,):
            if not part.shared or not part.evicts_only:
                return False
            group = part.groups[node]
            room = self._room_of(group[0].admitted.queue)
            for flavor, above in room.items():
                if all(c.admitted.assignment.usage.get(flavor, 0) > above for c in group):
                    break  # each gives up more of this flavor than its queue has above nominal
            else:
                return False
        return True

    def _keeps_alone(self, candidate: Candidate) -> bool:
        """Whether taking the least of `candidate` (its first pod, for a shrink) leaves its queue at or
        above its nominal quota."""
        if candidate.kind == "shrink":
            amounts: Mapping[str, int] = self._option(self._shrink_steps(candidate)[0]).amounts
        else:
            amounts = candidate.admitted.assignment.usage
        queue = candidate.admitted.queue
        room = self._room.get(queue)
        if room is None:
            cache = self.snapshot.cache
            room = {f: cache.usage.usage(queue, f) - cache.tree.nominal(queue, f) for f in self.flavors}
            self._room[queue] = room
        return all(amounts.get(flavor, 0) <= above for flavor, above in room.items())

    # ----------------------------------------------------------- one scope
    def scope(self, scope: _Scope) -> VictimSet | None:
        """The cheapest set of the scope: exact over its minimal sets while it is small, else greedy."""
        units = self._units(scope.candidates)
        if len(units) <= _EXACT_WORKLOADS:
            found = self._exact(scope, units)
            if found is not None:
                return VictimSet(self.preemptor.name, tuple(found))
        snapshot, fits, flavors = self.snapshot, self.fits, self.flavors
        greedy = _greedy(snapshot, scope.candidates, fits, flavors)
        if greedy is not None and not self.keeps_nominal(greedy):
            # Decision 8: a set that keeps every other queue at nominal first, if the scope has one.
            greedy = _greedy(snapshot, scope.candidates, fits, flavors, self._stays) or greedy
        return None if greedy is None else VictimSet(self.preemptor.name, tuple(self._trim(greedy)))

    def _stays(self, candidate: Candidate) -> bool:
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
        queue = candidate.admitted.queue
        return all(
            cache.usage.usage(queue, f) - amounts.get(f, 0) >= cache.tree.nominal(queue, f)
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
            steps = self._shrink_steps(candidate)
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
            _apply_if_held(snapshot, candidate)
        ok = self.fits()
        snapshot.rollback(mark)
        return ok

    def _units(self, scoped: Sequence[Candidate]) -> list[list[_Option]]:
        """Per workload of the scope, its options: shrink by one pod, two, ... (elastic), evict whole."""
        by_name: dict[str, list[_Option]] = {}
        for candidate in scoped:
            options = by_name.setdefault(candidate.name, [])
            if candidate.kind == "shrink":
                options[:0] = [self._option(c) for c in self._shrink_steps(candidate)]
            else:
                options.append(self._option(candidate))
        return sorted(by_name.values(), key=lambda options: _order(options[0].candidate))

    def _shrink_steps(self, full: Candidate) -> list[Candidate]:
        """Shrinks of `full`'s workload by 1, 2, ... of its pods, highest indices first, ending at `full`
        (the shrink to the minimum): a victim loses only the pods the preemptor needs."""
        steps = self._shrinks.get(full.name)
        if steps is not None:
            return steps
        admitted = full.admitted
        workload = admitted.workload
        prefixes = [f"{workload.name}/{ps.name}/" for ps in workload.pod_sets]
        order = sorted(
            full.pods,
            key=lambda pod: (
                -int(pod.rpartition("/")[2]),
                next(i for i, p in enumerate(prefixes) if pod.startswith(p)),
            ),
        )
        steps = []
        for taken in range(1, len(order) + 1):
            pods = tuple(order[:taken])
            counts = tuple(
                count - sum(1 for pod in pods if pod.startswith(prefix))
                for count, prefix in zip(admitted.assignment.counts, prefixes, strict=True)
            )
            if taken == len(order):
                steps.append(full)
                break
            removed = admitted.assignment.gpu_milli - _milli_at(admitted, counts)
            rows = tuple(dict.fromkeys(admitted.pods[pod].node for pod in pods))
            step = Candidate(
                admitted,
                "shrink",
                full.cause,
                admitted.lost_gpu_seconds(self.now, removed),
                pods,
                counts,
                rows,
            )
            step.order = victim_order(step)
            steps.append(step)
        self._shrinks[full.name] = steps
        return steps

    def _option(self, candidate: Candidate) -> _Option:
        admitted = candidate.admitted
        gpus: dict[int, int] = {}
        if candidate.kind == "evict":
            amounts = dict(admitted.assignment.usage)
            pods = list(admitted.pods.values())
        else:
            left = usage_of(admitted.workload, admitted.assignment.model, candidate.counts)
            amounts = {f: amount - left.get(f, 0) for f, amount in admitted.assignment.usage.items()}
            pods = [admitted.pods[pod] for pod in candidate.pods]
        for alloc in pods:
            gpus[alloc.node] = gpus.get(alloc.node, 0) + len(alloc.gpus)
        return _Option(candidate, amounts, gpus)

    def _exact(self, scope: _Scope, units: list[list[_Option]]) -> list[Candidate] | None:
        """The cheapest of the scope's minimal sets that pass quota and the capacity bound and then fit,
        or None when there is none, or the scope is too large to search (the caller goes greedy).

        A depth-first walk over the workloads (each: untouched, or one of its options) that stops a
        branch as soon as its set passes the checks (a larger set only costs more) or can no longer
        free enough GPUs. The sets found are then placed cheapest first."""
        snapshot = self.snapshot
        usage = snapshot.cache.usage
        version = usage.version
        capacity = _Capacity.of(self, scope, units)
        queue, wanted = self.preemptor.queue, self.assignment.usage
        leaves: list[tuple[tuple[int, Key], list[Candidate]]] = []
        chosen: list[_Option] = []
        steps = 0

        def visit(i: int) -> bool:
            """False when the step budget ran out."""
            nonlocal steps
            steps += 1
            if steps > _EXACT_STEPS:
                return False
            if chosen and capacity.enough() and usage.fits(queue, wanted) is None:
                allowed = self._allowed(chosen)
                if allowed is not None:
                    victims = [option.candidate for option in chosen]
                    leaves.append(((allowed, VictimSet(self.preemptor.name, tuple(victims)).cost()), victims))
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
        for _, victims in leaves[:_EXACT_TRIES]:
            mark = snapshot.mark()
            for candidate in victims:
                _apply(snapshot, candidate)
            ok = self.fits()
            snapshot.rollback(mark)
            if ok:
                return victims
        return None

    def _allowed(self, chosen: Sequence[_Option]) -> int | None:
        """With `chosen` refunded from the usage table: 0 when no other queue ends below its nominal
        quota, 1 when one does only by its last workload taken (it borrowed until then: a gang cannot be
        split), None when the set takes more from a queue than that."""
        cache = self.snapshot.cache
        usage, tree = cache.usage, cache.tree
        worst = 0
        largest: dict[tuple[str, str], int] = {}
        for option in chosen:
            q = option.candidate.admitted.queue
            if option.candidate.cause == WITHIN_QUEUE:
                continue
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
        cache = self.snapshot.cache
        taken: dict[tuple[str, str], int] = {}
        for candidate in victims:
            if candidate.cause == WITHIN_QUEUE:
                continue
            amounts = self._option(candidate).amounts
            for flavor in self.flavors:
                amount = amounts.get(flavor, 0)
                if amount:
                    key = (candidate.admitted.queue, flavor)
                    taken[key] = taken.get(key, 0) + amount
        return all(
            cache.usage.usage(q, flavor) - amount >= cache.tree.nominal(q, flavor)
            for (q, flavor), amount in taken.items()
        )


def _leaf_key(leaf: tuple[tuple[int, Key], list[Candidate]]) -> tuple[int, Key]:
    return leaf[0]


def _slots_shape(preemptor: Workload, assignment: Assignment) -> tuple[int, int] | None:
    """(whole GPUs per slot, slots needed) for a whole-GPU preemptor: slots of the pods' size when every
    pod set asks the same number of GPUs, else single GPUs; None for shared or MIG pods."""
    if assignment.model is None:
        return None
    sizes = set()
    gpus = pods = 0
    for pod_set, count in zip(preemptor.pod_sets, assignment.counts, strict=True):
        if pod_set.request.kind is not GpuKind.WHOLE:
            return None
        if count:
            sizes.add(pod_set.request.gpus)
            pods += pod_set.minimum
            gpus += pod_set.request.gpus * pod_set.minimum
    if len(sizes) == 1:
        size = sizes.pop()
        return (size, pods) if size > 0 else None
    return (1, gpus) if gpus > 0 else None


class _Capacity:
    """A necessary condition for placement during the exact search: enough free slots of the preemptor's
    pod size on the scope's nodes of its GPU model (whole GPUs per node, free plus freed)."""

    def __init__(
        self,
        size: int,
        needed: int,
        free: dict[int, int],
        slots: int,
        gpus: int,
        suffix: list[int],
    ) -> None:
        self.size = size
        self.needed = needed
        self.free = free
        self.freed: dict[int, int] = {}
        self.slots = slots
        self.gpus = gpus
        self.suffix = suffix
        """Per unit index, the most GPUs in scope the units from there on can free (by eviction)."""

    @classmethod
    def of(cls, search: _Search, scope: _Scope, units: list[list[_Option]]) -> _Capacity:
        shape = search.shape
        if shape is None or search.code is None:
            return _Unbounded()
        fleet = search.snapshot.fleet
        code = search.code
        size, needed = shape
        # Free GPUs of the nodes the options touch, for the changes; the scope's totals from the arrays.
        touched = {node for options in units for option in options for node in option.gpus}
        free = {
            node: int(fleet.whole_free[node])
            for node in touched
            if int(fleet.model[node]) == code and scope.covers(fleet, node)
        }
        if scope.node is not None:
            whole = free.get(scope.node)
            if whole is None:
                whole = int(fleet.whole_free[scope.node]) if int(fleet.model[scope.node]) == code else 0
            slots, gpus = whole // size, whole
        else:
            rows = scope.rows(fleet)
            array = fleet.whole_free[rows[fleet.model[rows] == code]]
            slots, gpus = int(np.sum(array // size)), int(np.sum(array))
        suffix = [0] * (len(units) + 1)
        for i in range(len(units) - 1, -1, -1):
            most = max(sum(g for node, g in o.gpus.items() if node in free) for o in units[i])
            suffix[i] = suffix[i + 1] + most
        return cls(size, needed, free, slots, gpus, suffix)

    def enough(self) -> bool:
        return self.slots >= self.needed

    def reachable(self, i: int) -> bool:
        return self.gpus + self.suffix[i] >= self.needed * self.size

    def take(self, option: _Option, sign: int) -> None:
        free, freed, size = self.free, self.freed, self.size
        for node, gpus in option.gpus.items():
            base = free.get(node)
            if base is None:
                continue
            old = freed.get(node, 0)
            new = old + sign * gpus
            freed[node] = new
            self.slots += (base + new) // size - (base + old) // size
            self.gpus += sign * gpus


class _Unbounded(_Capacity):
    """No capacity bound (shared or MIG pods): quota alone stops a branch."""

    def __init__(self) -> None:
        super().__init__(1, 0, {}, 0, 0, [])

    def reachable(self, i: int) -> bool:
        return True

    def take(self, option: _Option, sign: int) -> None:
        return None


def _quota_feasible(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, pool: Sequence[Candidate]
) -> bool:
    """Whether evicting candidates in order ever makes quota fit (cheap: quota arithmetic only)."""
    usage = snapshot.cache.usage
    version = usage.version
    done: list[Admitted] = []
    ok = usage.fits(preemptor.queue, assignment.usage) is None
    for candidate in pool.in_order() if isinstance(pool, _Pool) else pool:
        if ok:
            break
        if candidate.kind != "evict":
            continue
        usage.add(candidate.admitted.queue, candidate.admitted.assignment.usage, -1)
        done.append(candidate.admitted)
        ok = usage.fits(preemptor.queue, assignment.usage) is None
    for admitted in reversed(done):
        usage.add(admitted.queue, admitted.assignment.usage, 1)
    if done:
        usage.rewind(version)  # the table is exactly as it was: memos keyed by the version still hold
    return ok


def _capacity_feasible(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, pool: Sequence[Candidate]
) -> bool:
    """For whole-GPU workloads: free GPUs of the model plus the candidates' cover the need."""
    if assignment.model is None:
        return True
    needed = 0
    for pod_set, count in zip(preemptor.pod_sets, assignment.counts, strict=True):
        if pod_set.request.kind is not GpuKind.WHOLE:
            return True
        needed += pod_set.request.gpus * pod_set.minimum if count else 0
    fleet = snapshot.fleet
    # All nodes of the flavor's GPU model, whatever their capacity type: an upper bound is enough here.
    code = fleet.model_id(split_flavor(assignment.model)[0])
    rows = slice(0, fleet.n_rows)
    free = int(np.sum(fleet.whole_free[rows][fleet.model[rows] == code]))
    model = assignment.model
    if isinstance(pool, _Pool):
        milli = sum(part.milli(model) for part in pool.parts)
    else:
        milli = sum(c.admitted.assignment.usage.get(model, 0) for c in pool if c.kind == "evict")
    return free + milli // 1000 >= needed


def apply_victims(snapshot: Snapshot, victims: VictimSet) -> None:
    """Applies a chosen set to the snapshot (its capacity is then the preemptor's for the cycle)."""
    for candidate in victims.victims:
        _apply_if_held(snapshot, candidate)  # its queue's candidate lists no longer hold (see `holds`)


def _by_node(candidates: Iterable[Candidate]) -> tuple[dict[int, list[Candidate]], dict[int, int]]:
    """Per node the candidates touch: those candidates (in the given order), and the whole GPUs they
    hold there (a shrink holds nothing for the bound: its `held` is empty, so zip stops at once)."""
    groups: dict[int, list[Candidate]] = {}
    held: dict[int, int] = {}
    for candidate in candidates:
        for node in candidate.rows:
            group = groups.get(node)
            if group is None:
                groups[node] = [candidate]
            else:
                group.append(candidate)
        for node, gpus in zip(candidate.rows, candidate.held, strict=False):
            held[node] = held.get(node, 0) + gpus
    return groups, held
