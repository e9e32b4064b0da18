"""Capacity to come within one cycle (Kueue's rule, docs/scheduling.md decision 23).

Pods the world reports leaving (`ClusterCache.leaving`: victims terminating, pods being deleted) and,
where evictions take time (`ClusterCache.graceful_evictions`), the victims chosen earlier in the cycle
still hold their capacity, but it is coming. A workload that does not fit now but fits once they are
gone waits for them instead of choosing new victims, and takes a place in that capacity that later
waiters of the same cycle cannot take. Here are the pods the cycle waits for, the places waiters
took, and the what-ifs over them; which workload waits is the cycle's decision (`cycle.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.fleet.state import Allocation, AllocationError
from gpufleet.scheduler.cache import Snapshot
from gpufleet.scheduler.outcome import Admission
from gpufleet.scheduler.preemption import VictimSet


class CapacityToCome:
    """One cycle's leaving pods, in the order they began leaving, and the waiters' places in them."""

    def __init__(self, snapshot: Snapshot, leaving: list[str]) -> None:
        self.snapshot = snapshot
        self.leaving = leaving
        self.reserved: list[tuple[Allocation, ...]] = []
        """The places waiters took in it, in the order they took them."""
        # Shapes that did not fit in it (until more comes: forgotten when it grows).
        self.no_room: set[tuple[object, ...]] = set()

    def room(self, shape: tuple[object, ...], place: Callable[[], Admission | None]) -> Admission | None:
        """Where `place` puts a workload once the leaving pods are gone and the waiters before it took
        their places; None when it would not fit even then. The snapshot is left as it was."""
        if not self.leaving or shape in self.no_room:
            return None
        mark = self.snapshot.mark()
        self.open()
        room = place()
        self.snapshot.rollback(mark)
        if room is None:
            self.no_room.add(shape)
        return room

    def open(self) -> None:
        """What-if (rolled back by the caller): the leaving pods are gone, the waiters took their places."""
        statement = self.snapshot.statement
        held = self.snapshot.fleet.allocations
        for name in self.leaving:
            if name in held:
                statement.release(name)
        for allocations in self.reserved:
            for allocation in allocations:
                try:
                    statement.reinstate(allocation)
                except AllocationError:
                    # Part of a gang's place was free capacity, admitted to another since: the waiter
                    # keeps the rest, and takes its place again next cycle.
                    continue

    def waited_for(self, room: Admission) -> tuple[str, ...]:
        """The leaving pods on the nodes of `room` (what a waiter placed there waits for)."""
        rows = {a.node for a in room.allocations}
        held = self.snapshot.fleet.allocations
        return tuple(n for n in self.leaving if n in held and held[n].node in rows)

    def keep(self, victims: VictimSet) -> None:
        """Where evictions take time, this cycle's victims go on holding what they held, as leaving pods."""
        statement = self.snapshot.statement
        held = self.snapshot.fleet.allocations
        for candidate in victims.victims:
            pods = candidate.admitted.pods
            for pod in candidate.pods or tuple(pods):
                if pod not in held:  # a workload both shrunk and evicted by the set gave each pod up once
                    statement.reinstate(pods[pod])
                    self.leaving.append(pod)
        self.no_room.clear()

    def reserve(self, allocations: tuple[Allocation, ...]) -> None:
        """A waiter's place, held for the rest of the cycle."""
        self.reserved.append(allocations)
