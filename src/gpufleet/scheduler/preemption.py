"""Preemption: which admitted workloads to evict (or shrink) so that a pending one can start.

Steps (ARCHITECTURE.md, Scheduling cycle step 4):
1. candidates: workloads the preemptor's queue policy allows it to evict (`withinQueue`,
   `reclaimWithinCohort` when it would stay within its nominal quota, `borrowWithinCohort` when it
   would borrow); never a non-preemptible one, never one inside its queue's `minRuntimeSeconds`, never
   one in another tree; from another queue only while that queue borrows (so a queue within its
   nominal quota is never a reclaim target);
2. scopes: a workload that requires a topology domain is tried domain by domain (the candidates with
   pods in that domain), so victims free one domain rather than scattered capacity; a one-pod workload
   is tried node by node; any other workload over the whole fleet;
3. in each scope, candidates are given up in `victim_order` until the preemptor fits (quota and
   placement), then those not needed are added back in reverse order (a minimal set, as Kueue does);
4. the cheapest set over all scopes wins (lost work, then highest victim priority, then count).

Everything is tried on the snapshot and rolled back; the caller re-applies the chosen set. A preemption
is proposed only when the preemptor then fits: no loops of evictions that admit nobody.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gpufleet.fleet.request import GpuKind
from gpufleet.scheduler.cache import Admitted, Snapshot
from gpufleet.scheduler.flavors import Assignment, split_flavor
from gpufleet.scheduler.queueing import QueueSettings
from gpufleet.scheduler.workload import Workload

RECLAIM = "Reclaim"
WITHIN_QUEUE = "WithinQueue"
BORROW = "BorrowWithinCohort"

Kind = Literal["shrink", "evict"]


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
    3. less lost work first: GPUs x seconds since the last checkpoint (or since admission);
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

    def cost(self) -> tuple[float, int, int]:
        lost = sum(c.lost_gpu_seconds for c in self.victims)
        top = max((c.priority for c in self.victims), default=-(1 << 62))
        return lost, top, len(self.victims)


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
) -> list[Candidate]:
    """Every workload the preemptor may take capacity from, as shrink and/or evict candidates."""
    cache = snapshot.cache
    tree = cache.tree
    own_settings = cache.settings[preemptor.queue]
    root = tree.root_of(preemptor.queue)
    borrowing = _is_borrowing(snapshot, preemptor, assignment)
    flavors = set(assignment.usage)
    out: list[Candidate] = []
    queues = []
    if own_settings.preemption.within_queue != "Never":
        queues.append(preemptor.queue)
    if _reaches_others(own_settings, borrowing):
        queues.extend(q for q in _borrowing_queues(snapshot, root, flavors) if q != preemptor.queue)
    # The final sort ends in the name, so the order of this scan does not matter.
    reclaim_any = own_settings.preemption.reclaim_within_cohort == "Any"
    for queue in queues:
        kind = WITHIN_QUEUE if queue == preemptor.queue else BORROW if borrowing else RECLAIM
        # Reclaim with `Any` takes every workload of a borrowing queue: no per-victim rule to check.
        every = kind == RECLAIM and reclaim_any
        for candidate in _queue_candidates(snapshot, queue, kind, now=now):
            admitted = candidate.admitted
            if candidate.name == preemptor.name or (
                flavors and flavors.isdisjoint(admitted.assignment.usage)
            ):
                continue
            if every or kind == _cause(
                victim=admitted, preemptor=preemptor, settings=own_settings, borrowing=borrowing
            ):
                out.append(candidate)
    out.sort(key=_order)
    return out


def _order(candidate: Candidate) -> tuple[int, int, float, int, float, str]:
    order = candidate.order
    return order if order is not None else victim_order(candidate)


def _borrowing_queues(snapshot: Snapshot, root: str, flavors: set[str]) -> list[str]:
    """The queues of the tree under `root` with admitted workloads that borrow one of `flavors`.

    Memo for the cycle, keyed by the usage table's version: every preemptor of a cycle scans the same
    tree, and usage (so who borrows, and who has members) changes only between some of them."""
    cache = snapshot.cache
    usage = cache.usage
    key = ("borrowing", root, frozenset(flavors))
    found = snapshot.memo.get(key)
    if isinstance(found, tuple) and found[0] == usage.version:
        return list(found[1])
    tree = cache.tree
    queues = [
        name
        for name, members in cache.by_queue.items()
        if members and tree.root_of(name) == root and _borrows(snapshot, name, flavors)
    ]
    snapshot.memo[key] = (usage.version, queues)
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


def _queue_candidates(snapshot: Snapshot, queue: str, cause: str, *, now: float) -> list[Candidate]:
    """A queue's workloads that any preemptor may take from (preemptible, past the minimum runtime,
    not admitted in this cycle) as `cause` candidates.

    Kept on the cache across cycles (every preemptor of a tree looks at the same borrowing queues, cycle
    after cycle): reused while the queue's members are the same objects (an admission, eviction, shrink
    or checkpoint replaces one), its settings and the fleet's nodes unchanged; only the lost work, which
    depends on the time, is computed again when the time moved.
    """
    cache = snapshot.cache
    key = (queue, cause)
    settings = cache.settings[queue]
    token = (cache.queue_epochs.get(queue, 0), cache.fleet.generation, settings)
    found = cache.candidate_lists.get(key)
    if not (isinstance(found, _QueueCandidates) and found.holds(snapshot, queue, token)):
        found = _compute(snapshot, queue, cause, token)
        cache.candidate_lists[key] = found
    if found.now != now:
        for candidate, removed in zip(found.candidates, found.removed, strict=True):
            candidate.lost_gpu_seconds = candidate.admitted.lost_gpu_seconds(now, removed)
            candidate.order = victim_order(candidate)
        found.now = now
    min_runtime = settings.min_runtime_seconds
    if min_runtime <= 0:
        return found.candidates
    return [c for c in found.candidates if now - _started(c.admitted, now) >= min_runtime]


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
    snapshot: Snapshot, ordered: Sequence[Candidate], fits: Fits, flavors: set[str]
) -> list[Candidate] | None:
    """Gives up candidates in order until `fits`, then adds back the unneeded; rolls everything back."""
    start = snapshot.mark()
    taken: list[Candidate] = []
    removed: set[str] = set()
    found = False
    for candidate in ordered:
        if not _still_applicable(snapshot, candidate, flavors, removed):
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


def _scopes(snapshot: Snapshot, preemptor: Workload, pool: Sequence[Candidate]) -> list[list[Candidate]]:
    """The candidate lists to try: one per domain of the required level (or per node for one pod), each
    in the pool's order."""
    fleet = snapshot.fleet
    level = preemptor.topology.required
    if level is None and preemptor.min_pod_count == 1 and len(preemptor.pod_sets) == 1:
        level = "host"
    if level is None:
        return [list(pool)]
    level_no = fleet.level_number(level) if level not in ("host", "nvlink") else None
    by_domain: dict[int, list[Candidate]] = {}
    # Per node (host and nvlink levels): whole GPUs the evict candidates hold there (a shrink frees a
    # subset of its workload's evict), for the bound below.
    held: dict[int, int] = {}
    if level_no is None:
        for candidate in pool:
            for node in candidate.rows:
                scoped = by_domain.get(node)
                if scoped is None:
                    by_domain[node] = [candidate]
                else:
                    scoped.append(candidate)
            # A shrink holds nothing for the bound (`held` empty): zip stops at once.
            for node, gpus in zip(candidate.rows, candidate.held, strict=False):
                held[node] = held.get(node, 0) + gpus
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
    if level_no is None and needed is not None:
        # A node whose free GPUs and its candidates' GPUs together fall short cannot be freed enough:
        # skipping it spares a greedy search (a placement per candidate) that must fail. Shared pods
        # count a whole GPU each, so the bound only ever keeps too many nodes, never too few.
        whole_free = fleet.whole_free
        return [
            scoped
            for node, scoped in sorted(by_domain.items())
            if int(whole_free[node]) + held.get(node, 0) >= needed
        ]
    return [by_domain[d] for d in sorted(by_domain)]


def _one_pod_whole_gpus(preemptor: Workload) -> int | None:
    """The GPUs of a one-pod whole-GPU preemptor (None for any other shape)."""
    if len(preemptor.pod_sets) != 1 or preemptor.min_pod_count != 1:
        return None
    request = preemptor.pod_sets[0].request
    return request.gpus if request.kind is GpuKind.WHOLE else None


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
    """The cheapest minimal victim set after which `fits()` holds, or None; the snapshot is unchanged.
    `pool`: the `candidates` already computed for this preemptor and snapshot state."""
    if pool is None:
        pool = candidates(snapshot, preemptor, assignment, now=now)
    if not pool or not _quota_feasible(snapshot, preemptor, assignment, pool):
        return None
    if not _capacity_feasible(snapshot, preemptor, assignment, pool):
        return None
    flavors = set(assignment.usage)
    best: VictimSet | None = None
    scopes = [(_lower_bound(scoped), scoped) for scoped in _scopes(snapshot, preemptor, pool)]
    if len(scopes) > 1:
        # Cheapest first by a lower bound of any set a scope can give, so the search stops as soon as no
        # remaining scope can beat the best set found (a branch and bound over scopes). Stable: equal
        # bounds keep the scopes' order.
        scopes.sort(key=_first)
    for bound, scoped in scopes[:max_scopes]:
        if best is not None and bound >= best.cost():
            break
        found = _greedy(snapshot, scoped, fits, flavors)
        if found is None:
            continue
        option = VictimSet(preemptor.name, tuple(found))
        if best is None or option.cost() < best.cost():
            best = option
    return best


def _lower_bound(scoped: Sequence[Candidate]) -> tuple[float, int, int]:
    """No victim set from these candidates costs less: each set loses at least the least lost work of
    one candidate, its top priority is at least the lowest priority here, and it has a member."""
    lost = scoped[0].lost_gpu_seconds
    priority = scoped[0].admitted.workload.priority
    for candidate in scoped:
        if candidate.lost_gpu_seconds < lost:
            lost = candidate.lost_gpu_seconds
        other = candidate.admitted.workload.priority
        if other < priority:
            priority = other
    return lost, priority, 1


def _first(item: tuple[tuple[float, int, int], list[Candidate]]) -> tuple[float, int, int]:
    return item[0]


def _quota_feasible(
    snapshot: Snapshot, preemptor: Workload, assignment: Assignment, pool: Sequence[Candidate]
) -> bool:
    """Whether evicting candidates in order ever makes quota fit (cheap: quota arithmetic only)."""
    usage = snapshot.cache.usage
    version = usage.version
    done: list[Admitted] = []
    ok = usage.fits(preemptor.queue, assignment.usage) is None
    for candidate in pool:
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
    held = (
        sum(c.admitted.assignment.usage.get(assignment.model, 0) for c in pool if c.kind == "evict") // 1000
    )
    return free + held >= needed


def apply_victims(snapshot: Snapshot, victims: VictimSet) -> None:
    """Applies a chosen set to the snapshot (its capacity is then the preemptor's for the cycle)."""
    for candidate in victims.victims:
        _apply_if_held(snapshot, candidate)  # its queue's candidate lists no longer hold (see `holds`)
