"""The scheduler's authoritative cache and the per-cycle snapshot over it (Kueue's split).

`ClusterCache` is what the world feeds: the fleet, the quota tree and its usage, queue settings, usage
history, admitted and pending workloads. Only the world changes it, by applying decisions (`admit`,
`evict`, `shrink`) or reporting facts (`submit`, `finish`, `checkpoint`).

`Snapshot` is the cycle's view: it changes the same objects in place through an undo log (the fleet
through a `Statement`, the rest through inverse operations) and is rolled back to its start before the
cycle returns. Copying a 5,000-node fleet each cycle would cost more than the cycle itself; an undo log
gives the same guarantee (the cache is unchanged by a cycle) without the copy.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.fleet.state import Allocation, FleetState
from gpufleet.scheduler import claim_charges
from gpufleet.scheduler.attained import AttainedService
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.lostwork import lost_gpu_seconds
from gpufleet.scheduler.parking import ParkingLot
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory, user_key
from gpufleet.scheduler.quota import QuotaTree, QuotaUsage
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import Workload


@dataclass(slots=True)
class Admitted:
    """An admitted workload: the flavor and counts it runs with, and what each of its pods holds."""

    workload: Workload
    assignment: Assignment
    pods: dict[str, Allocation] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def queue(self) -> str:
        return self.workload.queue

    def lost_gpu_seconds(self, now: float, milli: int | None = None) -> float:
        """GPU-seconds of work lost if `milli` of its GPUs (all of them by default) stop now: since its
        admission, or a checkpoint taken after it (the core knows no pod's start)."""
        held = self.assignment.gpu_milli if milli is None else milli
        workload = self.workload
        return lost_gpu_seconds(held, workload.admitted_at, workload.last_checkpoint_at, now)


class ClusterCache:
    """The state the scheduler decides on, fed and changed only by the world."""

    def __init__(
        self,
        *,
        fleet: FleetState,
        tree: QuotaTree,
        settings: Mapping[str, QueueSettings],
        history: UsageHistory,
    ) -> None:
        self.fleet = fleet
        self.tree = tree
        self.usage = QuotaUsage(tree)
        self.settings = dict(settings)
        self.history = history
        self.admitted: dict[str, Admitted] = {}
        self.pending: dict[str, Workload] = {}
        self.user_usage: dict[str, int] = {}
        self.by_queue: dict[str, set[str]] = {}
        # Workloads that had victims evicted for them and wait to start: tried first in the next cycle,
        # so that the capacity freed for them is not taken by another workload (no preemption loops).
        self.nominated: list[str] = []
        # Inadmissible workloads and what would wake them (a memo across cycles; see parking.py).
        self.parking = ParkingLot()
        # Per quota-tree root: bumped whenever the world admits, evicts, shrinks or finishes a workload
        # there, i.e. whenever the set of possible preemption victims in that tree may have changed.
        self.epochs: dict[str, int] = {}
        self.queue_epochs: dict[str, int] = {}
        # Per queue and cause, its preemption candidates as last computed (a memo across cycles that
        # checks itself against the members it was computed from; see preemption/kept.py).
        self.candidate_lists: dict[tuple[str, str], object] = {}
        # Per queue: bumped by every charge or refund (never undone), so a memo of its members that saw
        # the same count saw the same members.
        self.charges: dict[str, int] = {}
        # Capacity to come (decision 23): pods (names in the fleet's allocations) that still hold their
        # node's resources but are on their way out, victims terminating or pods being deleted. A
        # workload that fits once they are gone waits for them instead of choosing new victims.
        self.leaving: set[str] = set()
        # Where an evicted pod keeps its node's resources until it is gone (Kubernetes' graceful
        # termination), the victims a cycle chooses are capacity to come for the rest of that cycle, not
        # free capacity: the world evicts them before it carries out the cycle's admissions, but their
        # capacity is not free by then. False where the world frees it at once (the in-memory worlds).
        self.graceful_evictions = False
        # Per workload, the GPU-seconds it ran before its current admission (least-attained-service
        # queues order and preempt by it); kept across evictions, forgotten when it finishes.
        self.service = AttainedService()
        # Admitted workloads that took over a shared claim's charge from one that left
        # (`claim_charges`): the world records their new usage, then clears this.
        self.recharged: set[str] = set()

    # ------------------------------------------------------------ world facts
    def replace_settings(self, settings: Mapping[str, QueueSettings]) -> None:
        """Queue settings changed in place: what was remembered under the old ones (parked workloads and
        their wake-ups, preemption candidates) is forgotten, so every workload is judged afresh."""
        self.settings = dict(settings)
        self.parking.clear()
        self.candidate_lists.clear()

    def submit(self, workload: Workload) -> None:
        if workload.name in self.pending or workload.name in self.admitted:
            raise ValueError(f"workload {workload.name} is already known")
        self.pending[workload.name] = workload

    def admit(
        self, workload: Workload, assignment: Assignment, allocations: Iterable[Allocation], *, now: float
    ) -> Admitted:
        """Records an admission decision: the pods take their allocations, the queue is charged."""
        self.pending.pop(workload.name, None)
        pods = {}
        for alloc in allocations:
            pods[alloc.pod] = self.fleet.reinstate(alloc)
        admitted = Admitted(dataclasses.replace(workload, admitted_at=now), assignment, pods)
        self._charge(admitted, 1)
        self.admitted[workload.name] = admitted
        self.parking.unpark(workload.name)
        self._changed(admitted.queue)
        self._record_history(admitted.queue, admitted.workload.user, now)
        return admitted

    def evict(self, name: str, *, now: float) -> Workload:
        """Evicts an admitted workload back to its queue, keeping its submission time and checkpoint."""
        admitted = self.admitted.pop(name)
        for pod in admitted.pods:
            self.fleet.release(pod)
        self._charge(admitted, -1)
        self._move_charges(admitted, now)
        self.service.stopped(
            name, gpu_milli=admitted.assignment.gpu_milli, admitted_at=admitted.workload.admitted_at, now=now
        )
        workload = dataclasses.replace(admitted.workload, admitted_at=None)
        self.pending[name] = workload
        self._changed(admitted.queue)
        self._record_history(admitted.queue, admitted.workload.user, now)
        return workload

    def shrink(self, name: str, pods: Iterable[str], counts: tuple[int, ...], *, now: float) -> None:
        """Removes some pods of an elastic workload (never below its minimum)."""
        admitted = self.admitted[name]
        self._charge(admitted, -1)
        for pod in pods:
            self.fleet.release(pod)
            del admitted.pods[pod]
        admitted.assignment = _with_counts(admitted, counts)
        self._charge(admitted, 1)
        self._changed(admitted.queue)
        self._record_history(admitted.queue, admitted.workload.user, now)

    def finish(self, name: str, *, now: float, hand_over: bool = True) -> None:
        """A workload ended: its pods and quota are freed, and the shared claims it paid for that others
        still use are charged to them (`hand_over`; a world that takes a workload out only to account
        it again at once, and derives the charges itself, says False)."""
        admitted = self.admitted.pop(name)
        for pod in admitted.pods:
            self.fleet.release(pod)
        self._charge(admitted, -1)
        if hand_over:
            self._move_charges(admitted, now)
        self.service.forget(name)
        self._changed(admitted.queue)
        self._record_history(admitted.queue, admitted.workload.user, now)

    def checkpoint(self, name: str, *, now: float) -> None:
        admitted = self.admitted[name]
        admitted.workload = dataclasses.replace(admitted.workload, last_checkpoint_at=now)

    def hold_leaving(self, allocation: Allocation) -> str:
        """A pod given up (evicted, or taken by a shrink) that goes on holding what it held until it is
        gone, as a terminating pod does: capacity to come. It is held under a name of its own, so that
        its workload may start again meanwhile; returns that name, for `gone`."""
        name = f"{allocation.pod}#leaving"
        serial = 1
        while name in self.fleet.allocations:
            serial += 1
            name = f"{allocation.pod}#leaving{serial}"
        self.fleet.reinstate(dataclasses.replace(allocation, pod=name))
        self.leaving.add(name)
        return name

    def gone(self, name: str) -> None:
        """A leaving pod is gone: what it held is free."""
        self.leaving.discard(name)
        if name in self.fleet.allocations:
            self.fleet.release(name)

    def _move_charges(self, leaving: Admitted, now: float) -> None:
        """The shared claims `leaving` paid for and others still use: charged to the next user
        (`claim_charges`). The receivers are noted in `recharged` for the world to record."""
        if not any(ps.charges for ps in leaving.workload.pod_sets):
            return
        workloads = {name: a.workload for name, a in self.admitted.items() if name != leaving.name}
        for move in claim_charges.moves(
            leaving.workload, leaving.assignment.counts, self.fleet.devices, workloads
        ):
            receiver = self.admitted[move.to]
            self._charge(receiver, -1)
            receiver.workload, receiver.assignment = claim_charges.charged(
                receiver.workload, receiver.assignment, move.charge
            )
            self._charge(receiver, 1)
            self._changed(receiver.queue)
            self._record_history(receiver.queue, receiver.workload.user, now)
            self.recharged.add(move.to)

    # ------------------------------------------------------------- internals
    def epoch(self, queue: str) -> int:
        """The change counter of the quota tree holding `queue`."""
        return self.epochs.get(self.tree.root_of(queue), 0)

    def _changed(self, queue: str) -> None:
        root = self.tree.root_of(queue) if queue in self.tree.nodes else queue
        self.epochs[root] = self.epochs.get(root, 0) + 1
        self.queue_epochs[queue] = self.queue_epochs.get(queue, 0) + 1

    def _charge(self, admitted: Admitted, sign: int) -> None:
        # Every change of a queue's admitted members, by the world or a cycle's what-if, comes here.
        self.charges[admitted.queue] = self.charges.get(admitted.queue, 0) + 1
        members = self.by_queue.setdefault(admitted.queue, set())
        if sign > 0:
            members.add(admitted.name)
        else:
            members.discard(admitted.name)
        self.usage.add(admitted.queue, admitted.assignment.usage, sign)
        key = user_key(admitted.queue, admitted.workload.user)
        self.user_usage[key] = self.user_usage.get(key, 0) + sign * admitted.assignment.gpu_milli

    def _record_history(self, queue: str, user: str, now: float) -> None:
        for flavor in set(self.usage.used[queue]) | set(self.history.flavors(queue)):
            self.history.record(queue, flavor, self.usage.usage(queue, flavor), now)
        key = user_key(queue, user)
        self.history.record(key, "*", self.user_usage.get(key, 0), now)

    def user_used(self, queue: str, user: str) -> int:
        return self.user_usage.get(user_key(queue, user), 0)

    def user_share(self, queue: str, user: str, weight: float, now: float) -> float:
        """A user's fair share inside a leaf queue at `now` (lower goes first): GPUs held plus `weight`
        times decayed history. At `now = math.inf`, what the share tends to while usage stays put."""
        return self.user_used(queue, user) + weight * self.history.average(user_key(queue, user), "*", now)


def _with_counts(admitted: Admitted, counts: tuple[int, ...]) -> Assignment:
    from gpufleet.scheduler.flavors import usage_of

    usage = usage_of(admitted.workload, admitted.assignment.model, counts)
    return Assignment(admitted.assignment.model, counts, usage)


Undo = Callable[[], None]
_SERIALS = itertools.count()


class Snapshot:
    """The cycle's view of the cache: every change is logged and undone by `restore`."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        # Tells this cycle's snapshot from earlier ones (memos on the cache that are checked once a cycle).
        self.serial = next(_SERIALS)
        self.statement = Statement(cache.fleet)
        self._undo: list[Undo] = []
        # Admitted in this cycle only: not yet carried out by the world, so never a victim.
        self.assumed: set[str] = set()
        # Per-cycle memos of the steps that read the snapshot (e.g. preemption candidates per queue);
        # whoever changes what a memo read drops it.
        self.memo: dict[object, object] = {}

    @property
    def fleet(self) -> FleetState:
        return self.cache.fleet

    def mark(self) -> tuple[int, int]:
        return self.statement.checkpoint(), len(self._undo)

    def rollback(self, mark: tuple[int, int]) -> None:
        fleet_mark, undo_mark = mark
        while len(self._undo) > undo_mark:
            self._undo.pop()()
        self.statement.rollback(fleet_mark)

    def restore(self) -> None:
        """Undoes everything; the cache is as the cycle found it."""
        self.rollback((0, 0))
        self.statement.discard()
        self.memo.clear()

    def remove(self, name: str) -> Admitted:
        """What-if: the workload is evicted."""
        cache = self.cache
        admitted = cache.admitted.pop(name)
        for pod in admitted.pods:
            self.statement.release(pod)
        cache._charge(admitted, -1)

        def undo() -> None:
            cache._charge(admitted, 1)
            cache.admitted[name] = admitted

        self._undo.append(undo)
        return admitted

    def shrink(self, name: str, pods: list[str], counts: tuple[int, ...]) -> Admitted:
        """What-if: `pods` of an elastic workload are removed, leaving `counts` per pod set."""
        cache = self.cache
        before = cache.admitted[name]
        cache._charge(before, -1)
        kept = {pod: alloc for pod, alloc in before.pods.items() if pod not in set(pods)}
        for pod in pods:
            self.statement.release(pod)
        after = Admitted(before.workload, _with_counts(before, counts), kept)
        cache.admitted[name] = after
        cache._charge(after, 1)

        def undo() -> None:
            cache._charge(after, -1)
            cache._charge(before, 1)
            cache.admitted[name] = before

        self._undo.append(undo)
        return after

    def assume(
        self, workload: Workload, assignment: Assignment, allocations: list[Allocation], *, now: float
    ) -> Admitted:
        """What-if: the workload is admitted with pods the statement already allocated."""
        cache = self.cache
        admitted = Admitted(
            dataclasses.replace(workload, admitted_at=now), assignment, {a.pod: a for a in allocations}
        )
        cache._charge(admitted, 1)
        cache.admitted[workload.name] = admitted
        pending = cache.pending.pop(workload.name, None)
        self.assumed.add(workload.name)

        def undo() -> None:
            self.assumed.discard(workload.name)
            cache._charge(admitted, -1)
            del cache.admitted[workload.name]
            if pending is not None:
                cache.pending[workload.name] = pending

        self._undo.append(undo)
        return admitted
