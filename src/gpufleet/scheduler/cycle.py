"""The scheduling cycle: pending workloads in, decisions out (admit+placement, preempt, pending+reason).

`Scheduler.cycle(cache, now=...)` is pure as far as its caller can tell: it works on a `Snapshot` of
the cache (an undo log over it) and leaves the cache exactly as it found it. A scheduler itself carries
from cycle to cycle only its random generator and what its placement policies learnt of the pods it
admitted (`learn`: the workload `fgd+` measures fragmentation against). Each world (the scenario
runner, the simulator, the embedded control plane, Kubernetes) applies the decisions its own way;
`apply_decisions` is how the in-memory worlds do it.

Steps, each a call:
1. heads: per leaf queue, its pending workloads in queue order (priority, the user's fair share inside
   the queue, submission time, name);
2. order: queues in a heap keyed by their next workload (within nominal quota before borrowing, then
   priority, the queue tree's fair share from the root down, submission time, name), re-keyed lazily
   as usage and fair shares move during the cycle;
3. quota: for each flavor the workload accepts, in order, the queue's quota along its path (and the
   per-user limit); an elastic workload may be admitted with fewer pods, down to its minimum;
4. placement: the first flavor that passes quota and placement wins;
5. preemption: if none did, and it does not fit in the capacity to come either (pods on their way
   out, see below), the cheapest victim set after which the workload fits; the victims are evicted and
   the workload waits for them (its capacity is held for the rest of the cycle);
6. decisions: everything left pending carries its reason.

Capacity to come (Kueue's rule, docs/scheduling.md decision 23): pods the world reports leaving
(`ClusterCache.leaving`: victims terminating, pods being deleted) and, where evictions take time
(`ClusterCache.graceful_evictions`), the victims chosen in this cycle still hold their capacity, but it
is coming. A workload that does not fit now but fits once they are gone (its quota fitting now, its
placement on what they free less what earlier waiters took of it) waits for them, nominated, and
chooses no new victim; a preemption search counts that capacity as freed too (`capacity_to_come.py`).

StrictFIFO queues stop at a head that cannot start; BestEffortFIFO queues go on with the next workload.
A BestEffortFIFO workload that cannot start is parked (`parking.py`): later cycles skip it, keeping its
reason, until quota or capacity it could use is released; only the first parked workload of each queue
stays in the order, to keep the queue's one preemption attempt per cycle where Kueue has it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np

from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler import explain
from gpufleet.scheduler.attained import waiting_level
from gpufleet.scheduler.cache import ClusterCache, Snapshot
from gpufleet.scheduler.capacity_to_come import CapacityToCome
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.explain import Admit, Pending, Preempt, Reason
from gpufleet.scheduler.flavors import (
    Assignment,
    candidate_models,
    counts_at,
    pinned,
    shrink_steps,
    usage_of,
)
from gpufleet.scheduler.outcome import (
    Admission,
    CycleResult,
    Failure,
    Outcome,
    Preemption,
    Waiting,
    apply_decisions,
)
from gpufleet.scheduler.parking import FlavorNeed, ParkedWorkload, ParkingLot
from gpufleet.scheduler.placement.dra.charge import without_held
from gpufleet.scheduler.placement.place import place_workload
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.scheduler.placement.result import PlacementResult
from gpufleet.scheduler.placement.scoring import ScorePolicy
from gpufleet.scheduler.preemption import (
    VictimSet,
    apply_victims,
    candidates,
    choose_count,
    reaches_other_queues,
    select_victims,
)
from gpufleet.scheduler.queueing import FairShare, QueueingStrategy, queue_order
from gpufleet.scheduler.settled import settled
from gpufleet.scheduler.workload import Workload, placement_shape

# What a cycle returns and how in-memory worlds carry it out live in `outcome`, imported from here too.
__all__ = ["CycleResult", "Scheduler", "apply_decisions"]


class Scheduler:
    """The scheduling core: built once from a configuration, then asked for one cycle at a time."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.rng = np.random.default_rng(self.config.seed)
        # Unknown class or policy names fail here, at construction, not in the first cycle.
        self.config.check_classes()
        # One instance per policy name in use, kept for the scheduler's lifetime: what a policy learns
        # of the workload (`learn`) carries over from cycle to cycle; its per-node caches do not (each
        # cycle starts with `invalidate`, since the world changed the fleet in between).
        self.policies: dict[str, ScorePolicy] = {
            name: get_policy(name) for name in self.config.policy_names()
        }

    def learn(self, requests: Iterable[PodRequest]) -> None:
        """Every policy in use learns these pods, admitted outside a learning cycle: the world carried out
        the admission of a what-if (`cycle(learn=False)`), such as an elastic workload's growth."""
        for request in requests:
            for policy in self.policies.values():
                policy.learn(request)

    def cycle(
        self, cache: ClusterCache, *, now: float, learn: bool = True, limit: int | None = None
    ) -> CycleResult:
        """One cycle. `learn=False` for a what-if whose admissions the world will not carry out: the
        placement policies then learn nothing from it.

        `limit` ends the cycle once it has admitted that many workloads, so a world can carry out the
        first admissions while the rest of a large backlog is still to be decided (Kueue, likewise,
        admits a bounded number per cycle). The workloads not reached are neither decided nor explained;
        the next cycle takes them up, ordering the queues afresh with the usage the cut cycle admitted,
        so the fixed point leaves nothing admissible pending, though a tie on quota may go another way
        than in one whole cycle (property test in tests/scheduler/test_cycle_properties.py)."""
        snapshot = Snapshot(cache)
        try:
            return _Cycle(self, snapshot, now, learn=learn, limit=limit).run()
        finally:
            snapshot.restore()


class _Cycle:
    """One cycle's working state: the snapshot, fair shares, memos of failures, the result."""

    def __init__(
        self,
        scheduler: Scheduler,
        snapshot: Snapshot,
        now: float,
        *,
        learn: bool = True,
        limit: int | None = None,
    ) -> None:
        self.config = scheduler.config
        self.limit = limit
        self.rng = scheduler.rng
        self.learns = learn
        # Every policy in use is an observer of the cycle's statement from the start, so every allocation
        # and release of the cycle (whichever policy placed it, and the preemption what-ifs) reaches every
        # policy's per-node cache.
        self.policies = scheduler.policies
        for policy in self.policies.values():
            policy.invalidate()
            snapshot.statement.add_observer(policy)
        self.snapshot = snapshot
        self.cache = snapshot.cache
        self.now = now
        self.result = CycleResult()
        cache = self.cache
        self.fair = FairShare(
            tree=cache.tree,
            usage=cache.usage,
            history=cache.history,
            settings=cache.settings,
            fair=self.config.fair_sharing,
            now=now,
        )
        # Admissions only take capacity, so a shape that did not fit stays unfit until a preemption
        # frees some: remembered per shape, forgotten after each preemption.
        self.no_fit: dict[tuple[object, ...], Reason] = {}
        self.no_victims: set[tuple[object, ...]] = set()
        # Kueue's rule: per queue and cycle, only the first workload that cannot start may preempt.
        self.preempted_for: set[str] = set()
        self._usage_memo: dict[str, dict[str, int]] = {}
        self._quota_reasons: dict[tuple[object, ...], Reason | None] = {}
        self._models_memo: dict[str, list[str | None]] = {}
        self._attempted: dict[str, Workload] = {}
        self._models_by_shape: dict[tuple[object, ...], list[str | None]] = {}
        self._needs_by_shape: dict[tuple[object, ...], tuple[FlavorNeed, ...]] = {}
        # Per preemptor searched this cycle: (only its own queue was searched, any candidate was found).
        self._searched: dict[str, tuple[bool, bool]] = {}
        self.parking: ParkingLot = cache.parking
        # Per queue, the parked workload that stands in the order for the queue's preemption attempt.
        self._parked_heads: dict[str, ParkedWorkload] = {}
        self._min_runtime = any(s.min_runtime_seconds > 0 for s in cache.settings.values())
        # Capacity to come: the pods holding it (those the world reports, then this cycle's victims where
        # evictions take time), and the places waiters took in it.
        fleet = cache.fleet
        self.room = CapacityToCome(snapshot, sorted(n for n in cache.leaving if n in fleet.allocations))

    # ---------------------------------------------------------------- steps
    def run(self) -> CycleResult:
        fleet = self.snapshot.fleet
        # Nominated preemptors first take the capacity freed for them; only what is left may wake others.
        self._nominated_first()
        self.parking.capacity.begin(fleet, watched=bool(self.parking.entries))
        self._wake()
        queues = self._heads()
        firsts = {q: first for q, ordered in queues.items() if (first := next(ordered, None)) is not None}
        # Keys order queues against each other: with one queue holding work, the heap never holds two
        # entries and no key would ever be compared (the common cycle: one arrival, room for it).
        order = self._key if len(firsts) > 1 else (lambda _: ())
        heap: list[tuple[tuple[object, ...], str]] = []
        for queue, first in firsts.items():
            self._current[queue] = first
            heapq.heappush(heap, (order(first), queue))
        while heap:
            if self.limit is not None and len(self.result.admitted) >= self.limit:
                break
            key, queue = heapq.heappop(heap)
            workload = self._current[queue]
            if heap:
                fresh = order(workload)
                if fresh != key and fresh > heap[0][0]:
                    heapq.heappush(heap, (fresh, queue))  # its queue's share moved: wait its turn
                    continue
            if workload.name in self._parked_heads:
                blocked = self._parked_head(workload)
            else:
                outcome = self._attempt(workload)
                blocked = self._record(workload, outcome)
            strict = self.cache.settings[queue].strategy is QueueingStrategy.STRICT_FIFO
            following = queues[queue]
            if blocked and strict:
                waiting = explain.queued(queue=queue)
                for behind in following:
                    self.result.pending[behind.name] = Pending(behind.name, waiting)
                continue
            nxt = next(following, None)
            if blocked and not strict:
                nxt = self._drain(queue, nxt, following)
            if nxt is not None:
                self._current[queue] = nxt
                heapq.heappush(heap, (order(nxt), queue))
        self.parking.capacity.end(fleet, watched=bool(self.parking.entries))
        self.result.settled = settled(self.result, self.cache, self.fair, self._min_runtime, self._memo_holds)
        return self.result

    def _drain(self, queue: str, nxt: Workload | None, following: Iterator[Workload]) -> Workload | None:
        """Decides at once the queue's next workloads that cannot fit its quota, returns the first other.

        Within a cycle a queue's available quota only shrinks (quota freed by a preemption reaches waiting
        workloads next cycle, see parking.py), so once the queue has had its preemption attempt, a
        workload needing a flavor the queue has none of left fails here exactly as it would at its turn
        in the order; deciding it now spares the order's bookkeeping for a backlog that cannot start.
        """
        if queue not in self.preempted_for:
            return nxt
        available: dict[str, int] = {}
        while nxt is not None and nxt.name not in self._parked_heads and self._exhausted(nxt, available):
            self._record(nxt, self._attempt(nxt))
            nxt = next(following, None)
        return nxt

    def _exhausted(self, workload: Workload, available: dict[str, int]) -> bool:
        """True when for every flavor the workload accepts, its queue has nothing left of some resource."""
        cache = self.cache
        if cache.tree.nodes[workload.queue].unlimited:
            return False
        models = self._models(workload)
        if not models:
            return False
        smallest = self._smallest(workload)
        for model in models:
            usage = self._usage_at(workload, model, smallest)
            if not usage:
                return False
            blocked = False
            for flavor, amount in usage.items():
                left = available.get(flavor)
                if left is None:
                    left = available[flavor] = cache.usage.available(workload.queue, flavor)
                if amount > left:
                    blocked = True
                    break
            if not blocked:
                return False
        return True

    def _wake(self) -> None:
        """Step 0: parked workloads whose quota or capacity may now let them start rejoin their queues."""
        cache = self.cache
        self.parking.wake(cache.pending, cache.usage, len(cache.fleet.models), self._user_fits)

    def _user_fits(self, workload: Workload, usage: Mapping[str, int]) -> bool:
        limit = self.cache.settings[workload.queue].user_gpu_limit
        if limit is None or not workload.user:
            return True
        return self.cache.user_used(workload.queue, workload.user) + sum(usage.values()) <= limit

    def _victim_memo(self, workload: Workload, *, own_only: bool, capacity: bool) -> tuple[object, ...]:
        """What a failed preemption search depended on besides the preemptor (see parking.py): the
        admitted workloads of its own queue and the quota left to it (when it could only take from its own
        queue) or the admitted workloads of its tree, free
        capacity of its flavors (unless it found no candidates at all), and time with minimum runtimes."""
        cache = self.cache
        epoch: object = cache.epoch(workload.queue)
        if own_only:
            # Other queues matter only through the quota they leave this queue.
            flavors = sorted(
                {f for m in self._models(workload) for f in usage_of(workload, m, counts_at(workload, 0))}
            )
            left = tuple(cache.usage.available(workload.queue, f) for f in flavors)
            epoch = (cache.queue_epochs.get(workload.queue, 0), left)
        rose = None
        if capacity:
            watch = self.parking.capacity
            rose = max(watch.rose_at(m) for m in self._models(workload))
        return (own_only, capacity, epoch, rose, self.now if self._min_runtime else None)

    def _memo_holds(self, entry: ParkedWorkload) -> bool:
        """Whether a parked workload's failed preemption search would find the same now (`_victim_memo`)."""
        memo = entry.victim_memo
        if memo is None:
            return False
        return memo == self._victim_memo(entry.workload, own_only=bool(memo[0]), capacity=bool(memo[1]))

    def _parked_head(self, workload: Workload) -> bool:
        """A parked workload reached in queue order: it is the queue's first that cannot start."""
        entry = self._parked_heads[workload.name]
        queue = workload.queue
        if queue in self.preempted_for or self._memo_holds(entry):
            self.preempted_for.add(queue)
            self.result.pending[workload.name] = entry.pending
            return True
        self.parking.unpark(workload.name)
        return self._record(workload, self._attempt(workload))

    def _smallest(self, workload: Workload) -> tuple[int, ...]:
        """Pod counts at the workload's minimum size."""
        return counts_at(workload, shrink_steps(workload))

    def _usage_at(self, workload: Workload, model: str | None, counts: tuple[int, ...]) -> dict[str, int]:
        """`usage_of`. Not remembered per workload: a memo entry per workload of a 50,000 backlog would
        outlive its use and cost more in garbage collection than computing it again."""
        return usage_of(workload, model, counts)

    def _models(self, workload: Workload) -> list[str | None]:
        """The flavors to try for a workload, in order (memo for the cycle)."""
        models = self._models_memo.get(workload.name)
        if models is None:
            # The answer depends on the queue and the pods' requests only: shared by workloads alike.
            shape = (workload.queue, tuple((ps.request, ps.charges) for ps in workload.pod_sets))
            models = self._models_by_shape.get(shape)
            if models is None:
                cache = self.cache
                node = cache.tree.nodes[workload.queue]
                models = candidate_models(
                    workload,
                    queue_flavors=list(node.quotas),
                    fleet_models=cache.fleet.models,
                    unlimited=node.unlimited,
                )
                self._models_by_shape[shape] = models
            self._models_memo[workload.name] = models
        return models

    def _park(self, workload: Workload, failure: Failure) -> None:
        cache = self.cache
        # A least-attained-service queue's order moves with time (running workloads age into lower
        # levels, waiting ones are promoted), not only with released capacity: its workloads stay unparked.
        if cache.settings[workload.queue].strategy is not QueueingStrategy.BEST_EFFORT_FIFO:
            return
        smallest = self._smallest(workload)
        # Quota is checked at the minimum size first, so a flavor that failed on placement fitted it.
        wanted = tuple(
            (model, self._usage_at(workload, model, smallest), model not in failure.quota_short)
            for model in self._models(workload)
        )
        # Workloads of a backlog wait for the same few things: one (immutable) tuple of needs each.
        shape = tuple((model, tuple(usage.items()), fitted) for model, usage, fitted in wanted)
        needs = self._needs_by_shape.get(shape)
        if needs is None:
            needs = self._needs_by_shape[shape] = tuple(FlavorNeed(*want) for want in wanted)
        memo = None
        searched = self._searched.get(workload.name)
        if failure.searched and searched is not None:
            own_only, any_candidates = searched
            memo = self._victim_memo(workload, own_only=own_only, capacity=any_candidates)
        self.parking.park(
            ParkedWorkload(
                workload,
                failure.reason,
                needs,
                self.parking.capacity.counter,
                memo,
                self.result.pending[workload.name],
                # No model to try: in an unlimited queue a node of a new GPU model may give it one.
                None if needs else len(cache.fleet.models),
            )
        )

    def _nominated_first(self) -> None:
        """Step 0: workloads whose victims were evicted last cycle start first, on the capacity freed."""
        cache = self.cache
        for name in cache.nominated:
            workload = cache.pending.get(name)
            if workload is None or workload.queue not in cache.tree.nodes:
                continue
            node = cache.tree.nodes[workload.queue]
            models = candidate_models(
                workload,
                queue_flavors=list(node.quotas),
                fleet_models=cache.fleet.models,
                unlimited=node.unlimited,
            )
            for model in models:
                found = self._admit_with(workload, model)
                if isinstance(found, Admission):
                    self._record(workload, found)
                    break

    def _heads(self) -> dict[str, Iterator[Workload]]:
        """Step 1: per leaf queue, its pending workloads in queue order.

        Parked workloads are taken from the parking lot per queue (after `_wake`, every entry there is a
        pending workload as it is now): only each user's first one can be the queue's first parked."""
        cache = self.cache
        parking = self.parking
        self._current: dict[str, Workload] = {}
        tree = cache.tree
        leaves: dict[str, bool] = {}

        def is_leaf(queue: str) -> bool:
            leaf = leaves.get(queue)
            if leaf is None:
                leaf = leaves[queue] = queue in tree.nodes and tree.is_leaf(queue)
            return leaf

        entries = parking.entries
        loose = [w for name, w in cache.pending.items() if name not in entries]
        parked_queues = []
        for queue, by_user in parking.by_queue.items():
            if is_leaf(queue):
                parked_queues.append(queue)
            else:
                loose.extend(e.workload for named in by_user.values() for e in named.values())
        by_queue: dict[str, list[Workload]] = {}
        for workload in loose:
            queue = workload.queue
            if not is_leaf(queue):
                message = f"queue {queue!r} is not a leaf queue of the quota tree"
                self.result.pending[workload.name] = Pending(
                    workload.name, Reason(explain.QUOTA_EXCEEDED, message, {"queue": queue})
                )
                continue
            by_queue.setdefault(queue, []).append(workload)
        weight = self.config.fair_sharing.history_weight
        out: dict[str, Iterator[Workload]] = {}
        pending = self.result.pending
        for queue in by_queue.keys() | set(parked_queues):
            items = by_queue.get(queue, [])
            parked_users = parking.by_queue.get(queue, {})
            users = {w.user for w in items} | parked_users.keys()
            share: dict[str, float] = {}
            if len(users) > 1:
                share = {u: cache.user_share(queue, u, weight, self.now) for u in users}
            order = queue_order(share, self._las_level(queue))
            if parked_users:
                # Only the first parked workload stays in the order (for the queue's preemption attempt);
                # the others keep the reason they were parked with.
                firsts = [parking.first_of(queue, user) for user in parked_users]
                first = min(firsts, key=lambda e: order(e.workload))
                pending.update(parking.decisions[queue])
                del pending[first.workload.name]
                self._parked_heads[first.workload.name] = first
                items.append(first.workload)
            items.sort(key=order)
            out[queue] = iter(items)
        return out

    def _las_level(self, queue: str) -> Callable[[Workload], int] | None:
        """A least-attained-service queue's level of a pending workload now (None for other queues)."""
        settings = self.cache.settings[queue]
        if not settings.least_attained:
            return None
        service, now = self.cache.service, self.now
        return lambda w: waiting_level(settings.las, service.of(w.name), submitted_at=w.submitted_at, now=now)

    def _key(self, workload: Workload) -> tuple[object, ...]:
        """Step 2: the global order of queues by their next workload.

        As in Kueue, a workload that fits its queue's nominal quota goes before one that would borrow,
        whatever their priorities: a queue reclaiming its own quota must not lose it again to the
        borrower it just evicted (that would be a preemption loop).
        """
        return (
            self._borrows(workload),
            -workload.priority,
            self.fair.path(workload.queue),
            workload.submitted_at,
            workload.name,
        )

    def _borrows(self, workload: Workload) -> bool:
        cache = self.cache
        usage = self._usage_memo.get(workload.name)
        if usage is None:
            usage = {}
            if not cache.tree.nodes[workload.queue].unlimited:
                models = self._models(workload)
                if models:
                    usage = self._usage_at(workload, models[0], self._smallest(workload))
            self._usage_memo[workload.name] = usage
        return bool(usage) and cache.usage.guarantor(workload.queue, usage) is None

    def _record(self, workload: Workload, outcome: Outcome) -> bool:
        """Step 6: turns an outcome into decisions and the snapshot's new state; True if it did not start."""
        workload = self._attempted.pop(workload.name, workload)  # as `_attempt` decided it
        name = workload.name
        if isinstance(outcome, Admission):
            self.snapshot.assume(workload, outcome.assignment, list(outcome.allocations), now=self.now)
            self._learn(workload, outcome.assignment)
            self.result.admitted.append(
                Admit(name, outcome.assignment, outcome.allocations, outcome.nodes, outcome.claims)
            )
            self.fair.refresh(workload.queue)
            return False
        if isinstance(outcome, Preemption):
            victims = outcome.victims.victims
            names = []
            for candidate in victims:
                whole = candidate.kind == "evict"
                message = (
                    f"{'evicted' if whole else 'shrunk'} for {name} ({candidate.cause}): "
                    f"priority {candidate.priority} vs {workload.priority}, "
                    f"{candidate.lost_gpu_seconds:g} GPU-seconds since the last checkpoint"
                )
                self.result.preempted.append(
                    Preempt(
                        candidate.name,
                        name,
                        candidate.cause,
                        message,
                        candidate.lost_gpu_seconds,
                        () if whole else candidate.pods,
                        () if whole else candidate.counts,
                    )
                )
                names.append(candidate.name)
                self.fair.refresh(candidate.admitted.queue)
            self.fair.refresh(workload.queue)
            self.result.nominated.append(name)
            self.result.pending[name] = Pending(name, explain.waiting_for_preemption(names))
            self.no_fit.clear()
            self.no_victims.clear()
            self.room.no_room.clear()
            return True
        if isinstance(outcome, Waiting):
            self._reserve(workload, outcome.admission)
            self.result.nominated.append(name)
            self.result.pending[name] = Pending(name, explain.waiting_for_capacity(outcome.leaving))
            return True
        self.result.pending[name] = Pending(name, outcome.reason)
        self._park(workload, outcome)
        return True

    def _learn(self, workload: Workload, assignment: Assignment) -> None:
        """Every policy in use learns every pod admitted, whichever class and policy placed it."""
        if not self.learns:
            return
        for pod_set, count in zip(workload.pod_sets, assignment.counts, strict=True):
            for policy in self.policies.values():
                for _ in range(count):
                    policy.learn(pod_set.request)

    # ------------------------------------------------------------- attempt
    def _attempt(self, workload: Workload) -> Outcome:
        """Steps 3-5 for one workload. A workload whose request makes them fail (a bug its numbers
        trip) is left out with the error as its reason, and what it changed is undone: one tenant's
        object must not stop the cycle for every other. The error goes back to the world in the
        result (`CycleResult.errors`), to be logged and counted."""
        mark = self.snapshot.mark()
        try:
            # a shared claim admitted earlier (this cycle or before) is charged to its workload only
            workload = self._attempted[workload.name] = without_held(
                workload, self.snapshot.fleet.devices.shared
            )
            return self._decide(workload)
        except Exception as exc:
            self.snapshot.rollback(mark)
            self.result.errors[workload.name] = exc
            return Failure(explain.scheduling_error(exc))

    def _decide(self, workload: Workload) -> Outcome:
        queue = workload.queue
        models = self._models(workload)
        if not models:
            wanted = sorted({m for ps in workload.pod_sets for m in ps.request.gpu_models})
            if self.cache.tree.nodes[queue].unlimited:
                return Failure(explain.no_model_node(workload.name, wanted))
            return Failure(explain.no_flavor(workload.name, queue, wanted))
        first: Reason | None = None
        short: list[str | None] = []
        for model in models:
            found = self._admit_with(workload, model)
            if isinstance(found, Admission):
                return found
            first = first or found.reason
            if found.reason.type == explain.QUOTA_EXCEEDED:
                short.append(model)
        assert first is not None
        if first.type == explain.NO_FIT and first.details.get("never"):
            return Failure(first, quota_short=tuple(short))
        waiting = self._wait_for_room(workload, models)
        if waiting is not None:
            return waiting
        if queue in self.preempted_for:
            return Failure(first, quota_short=tuple(short))
        self.preempted_for.add(queue)
        for model in models:
            preemption = self._preempt_for(workload, model)
            if preemption is not None:
                return preemption
        return Failure(first, searched=True, quota_short=tuple(short))

    def _admit_with(self, workload: Workload, model: str | None) -> Admission | Failure:
        counts = self._quota_counts(workload, model)
        if isinstance(counts, Reason):
            return Failure(counts)
        shape = placement_shape(workload, model, counts)
        known = self.no_fit.get(shape)
        if known is not None:
            return Failure(known)
        mark = self.snapshot.mark()
        placed = self._place(workload, model, counts)
        if placed.no_fit is not None:
            self.snapshot.rollback(mark)
            reason = explain.no_fit(placed.no_fit)
            if placed.no_fit.never:
                reason = Reason(reason.type, reason.message, {**reason.details, "never": True})
            self.no_fit[shape] = reason
            return Failure(reason)
        return self._admission(workload, model, placed)

    def _admission(self, workload: Workload, model: str | None, placed: PlacementResult) -> Admission:
        fleet = self.snapshot.fleet
        got = placed.counts()
        counts = tuple(got.get(ps.name, 0) for ps in workload.pod_sets)
        assignment = Assignment(model, counts, usage_of(workload, model, counts))
        allocations = tuple(fleet.allocations[p.pod] for p in placed.placements)
        nodes = tuple(p.node for p in placed.placements)
        claims = (
            tuple(p.claims for p in placed.placements) if any(p.claims for p in placed.placements) else ()
        )
        return Admission(assignment, allocations, nodes, claims)

    def _place(self, workload: Workload, model: str | None, counts: tuple[int, ...]) -> PlacementResult:
        return place_workload(
            self.snapshot.fleet,
            pinned(workload, model, counts),
            policy=self.policies[self.config.policy_for(workload.workload_class)],
            rng=self.rng,
            statement=self.snapshot.statement,
        )

    def _quota_counts(self, workload: Workload, model: str | None) -> tuple[int, ...] | Reason:
        """The most pods per pod set the queue's quota and the user's limit allow (elastic: >= minimum)."""
        steps = shrink_steps(workload)
        full = counts_at(workload, 0)
        problem = self._quota_problem(workload, model, full)
        if problem is None:
            return full
        if steps == 0 or self._quota_problem(workload, model, counts_at(workload, steps)) is not None:
            return problem
        low, high = 0, steps  # counts_at(high) fits, counts_at(low) does not
        while high - low > 1:
            mid = (low + high) // 2
            if self._quota_problem(workload, model, counts_at(workload, mid)) is None:
                high = mid
            else:
                low = mid
        return counts_at(workload, high)

    def _quota_problem(self, workload: Workload, model: str | None, counts: tuple[int, ...]) -> Reason | None:
        cache = self.cache
        usage = self._usage_at(workload, model, counts)
        # A backlog asks the same queue about the same amounts between two changes of usage: one reason.
        key = (workload.queue, tuple(usage.items()), cache.usage.version)
        found = self._quota_reasons.get(key, _UNSEEN)
        if found is _UNSEEN:
            short = cache.usage.fits(workload.queue, usage)
            found = self._quota_reasons[key] = None if short is None else explain.quota_exceeded(short)
        if found is not None:
            return found
        limit = cache.settings[workload.queue].user_gpu_limit
        if limit is not None and workload.user:
            used = cache.user_used(workload.queue, workload.user)
            requested = sum(usage.values())
            if used + requested > limit:
                return explain.user_limit_exceeded(
                    queue=workload.queue, user=workload.user, used=used, requested=requested, limit=limit
                )
        return None

    def _preempt_for(self, workload: Workload, model: str | None) -> Preemption | None:
        """The cheapest victims after which the workload fits at its full count; an elastic workload
        may take fewer pods, down to its minimum, where their victims rank better (decision 30)."""
        chosen = choose_count(
            shrink_steps(workload), lambda step: self._victims_at(workload, model, counts_at(workload, step))
        )
        if chosen is None:
            return None
        counts, victims = counts_at(workload, chosen[0]), chosen[1]
        self.parking.capacity.lower(
            self.snapshot.fleet, [a.node for c in victims.victims for a in c.admitted.pods.values()]
        )
        apply_victims(self.snapshot, victims)
        if self.cache.graceful_evictions:
            self.room.keep(victims)
        placed = self._place(workload, model, counts)
        if placed.no_fit is None:
            admission = self._admission(workload, model, placed)
            self.snapshot.assume(workload, admission.assignment, list(admission.allocations), now=self.now)
        else:  # it needs capacity to come (its victims', where they hold it until gone)
            room = self._room_to_come(workload, model, counts)
            if room is not None:
                self._reserve(workload, room)
        return Preemption(victims)

    def _victims_at(self, workload: Workload, model: str | None, counts: tuple[int, ...]) -> VictimSet | None:
        """The cheapest victim set after which the workload fits with `counts` pods, or None."""
        newer = self.cache.settings[workload.queue].preemption.within_queue == "LowerOrNewerEqualPriority"
        at = workload.submitted_at if newer else None
        level = self._las_level(workload.queue)
        rank = level(workload) if level is not None else None
        memo = (workload.queue, workload.priority, at, rank, placement_shape(workload, model, counts))
        if memo in self.no_victims:
            return None
        assignment = Assignment(model, counts, usage_of(workload, model, counts))

        def fits() -> bool:
            if self._quota_problem(workload, model, counts) is not None:
                return False
            mark = self.snapshot.mark()
            placed = self._place(workload, model, counts)
            self.snapshot.rollback(mark)
            return placed.no_fit is None

        victims = self._search_victims(workload, assignment, fits)
        if victims is None:
            self.no_victims.add(memo)
        return victims

    def _search_victims(
        self, workload: Workload, assignment: Assignment, fits: Callable[[], bool]
    ) -> VictimSet | None:
        """The cheapest victim set, searched where the capacity to come is already free (less what
        waiters took of it): victims are needed only for what it does not cover. The snapshot is left as
        it was."""
        mark = self.snapshot.mark() if self.room.leaving else None
        if mark is not None:
            self.room.open()
        try:
            pool = candidates(self.snapshot, workload, assignment, now=self.now)
            own_only, any_candidates = self._searched.get(workload.name, (True, False))
            self._searched[workload.name] = (
                own_only and not reaches_other_queues(self.snapshot, workload, assignment, now=self.now),
                any_candidates or bool(pool),
            )
            return select_victims(self.snapshot, workload, assignment, fits, now=self.now, pool=pool)
        finally:
            if mark is not None:
                self.snapshot.rollback(mark)

    # ------------------------------------------------------- capacity to come
    def _wait_for_room(self, workload: Workload, models: list[str | None]) -> Waiting | None:
        """A workload that did not fit now but fits once the leaving pods are gone waits for them."""
        if not self.room.leaving:
            return None
        for model in models:
            counts = self._quota_counts(workload, model)
            if isinstance(counts, Reason):
                continue  # quota is not coming: only capacity is
            room = self._room_to_come(workload, model, counts)
            if room is not None:
                return Waiting(room, self.room.waited_for(room))
        return None

    def _room_to_come(
        self, workload: Workload, model: str | None, counts: tuple[int, ...]
    ) -> Admission | None:
        """Where the workload would be placed once the leaving pods are gone and the waiters before it
        took their places; None when it would not fit even then. The snapshot is left as it was."""

        def place() -> Admission | None:
            placed = self._place(workload, model, counts)
            return self._admission(workload, model, placed) if placed.no_fit is None else None

        return self.room.room(placement_shape(workload, model, counts), place)

    def _reserve(self, workload: Workload, room: Admission) -> None:
        """A waiter holds its quota now, and its place in the capacity to come for the rest of the cycle."""
        self.snapshot.assume(workload, room.assignment, [], now=self.now)
        self.room.reserve(room.allocations)
        self.fair.refresh(workload.queue)


_UNSEEN = Reason("", "")
"""Marks a memo miss where None is a remembered answer."""
