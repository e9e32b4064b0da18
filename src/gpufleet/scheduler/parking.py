"""Parking: workloads found inadmissible wait outside the cycle until something relevant changes.

This is Kueue's "inadmissible workloads" for BestEffortFIFO queues. Re-trying every pending workload
every cycle costs quota arithmetic and placement for work that cannot start; on a big backlog that is
almost all of a cycle. A workload that fails is parked with what it was waiting for, and each cycle
starts by waking those whose wait may be over:

- quota: for some flavor it accepts, its queue's quota (and the per-user limit) now fits the workload
  at its minimum size, where it did not when it was parked: usage was released in its part of the tree;
- capacity: for some flavor whose quota fits, free capacity rose since it was parked on a node of that
  GPU model (any node for a workload without a model), or nodes changed (added, removed, cordoned,
  tainted, relabelled): a finished workload or a new node may let it be placed;
- a new GPU model: a workload that found no model to try (an unlimited queue and no node of a model it
  accepts) wakes when a node of a model the fleet did not know joins;
- a changed workload (the world replaced the pending object) is no longer parked.

Checks are value-based, taken from the cache at the start of a cycle, so a world that changes the cache
directly (not only through `ClusterCache` methods) still wakes the right workloads. Capacity is compared
with the lowest free capacity the previous cycle passed through on each node (`CapacityWatch`): a
workload parked mid-cycle saw at least that much, so nothing rising above it means it still cannot be
placed. Capacity freed by a preemption during a cycle reaches parked workloads at the next cycle.

Preemption: each queue's first failing workload (parked or not) keeps Kueue's one preemption attempt
per queue and cycle; a parked one repeats its search only when the admitted workloads of its quota tree
changed, capacity rose, or (with minimum runtimes) time moved: `victim_memo`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.explain import Pending, Reason
from gpufleet.scheduler.flavors import model_of
from gpufleet.scheduler.quota import QuotaUsage
from gpufleet.scheduler.workload import Workload

ANY_MODEL = ""
"""Capacity key for workloads without a GPU model (MIG, CPU-only): any node counts."""


@dataclass(frozen=True, slots=True)
class FlavorNeed:
    """One flavor a parked workload accepts: its usage at minimum size and whether quota fitted it."""

    model: str | None
    usage: Mapping[str, int]
    quota_fitted: bool
    key: tuple[tuple[str, int], ...] = field(init=False)
    """The usage as a hashable key (computed once: every cycle's wake-up reads it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", tuple(self.usage.items()))


@dataclass(frozen=True, slots=True)
class ParkedWorkload:
    workload: Workload
    reason: Reason
    needs: tuple[FlavorNeed, ...]
    mark: int
    """`CapacityWatch.counter` when parked: capacity that rose after it is news to this workload."""
    victim_memo: tuple[object, ...] | None
    """Set when its own preemption search found no victims, to the state it searched (see module doc)."""
    pending: Pending
    """The decision repeated for it while it stays parked."""
    models_known: int | None = None
    """Set when it found no GPU model to try (an unlimited queue, no node of a model it accepts): the
    number of GPU models the fleet knew then. It wakes when a node of a new model joins."""


Arrays = tuple[npt.NDArray[np.int64], ...]


class CapacityWatch:
    """Notices free capacity that rose since the previous cycle, per GPU model."""

    def __init__(self) -> None:
        self.counter = 0
        self.rose: dict[str, int] = {}
        self._baseline: Arrays | None = None
        self._generation = -1
        self._low: Arrays | None = None

    def begin(self, fleet: FleetState, *, watched: bool = True) -> None:
        """Cycle start: compares free capacity with the baseline; starts tracking this cycle's low.

        `watched`: something is parked. With nothing parked no comparison can wake anyone, so every
        model counts as risen now, which only the workloads parked from now on measure against."""
        now = _free_arrays(fleet)
        base = self._baseline
        if (
            not watched
            or base is None
            or fleet.generation != self._generation
            or _shapes(base) != _shapes(now)
        ):
            self.counter += 1
            self.rose = {key: self.counter for key in (*fleet.models, ANY_MODEL)}
        else:
            rows = _rows_rose(base, now)
            if rows.size:
                self.counter += 1
                self.rose[ANY_MODEL] = self.counter
                for code in np.unique(fleet.model[rows]):
                    if code >= 0:
                        self.rose[fleet.models[int(code)]] = self.counter
        self._generation = fleet.generation
        self._low = now  # a copy already, which nothing else holds

    def lower(self, fleet: FleetState, rows: list[int]) -> None:
        """Before capacity on `rows` is freed mid-cycle: remember how low those rows were."""
        if self._low is None or not rows:
            return
        index = np.asarray(sorted(set(rows)), dtype=np.intp)
        for low, now in zip(self._low, _free_arrays(fleet), strict=True):
            if low.shape == now.shape:
                low[index] = np.minimum(low[index], now[index])

    def end(self, fleet: FleetState, *, watched: bool = True) -> None:
        """Cycle end (decisions assumed): the baseline is the lowest each node was during the cycle.

        `watched`: something is parked. With nothing parked the next cycle starts unwatched (only a
        cycle parks), reads no baseline, and none is kept."""
        low = self._low
        self._low = None
        if not watched:
            self._baseline = None
            return
        now = _free_arrays(fleet)
        if low is None or _shapes(low) != _shapes(now):
            self._baseline = now
        else:
            self._baseline = tuple(np.minimum(a, b) for a, b in zip(low, now, strict=True))

    def rose_since(self, flavor: str | None, mark: int) -> bool:
        return self.rose_at(flavor) > mark

    def rose_at(self, flavor: str | None) -> int:
        """When capacity last rose on a node of the flavor's GPU model (any node for None)."""
        return self.rose.get(model_of(flavor) or ANY_MODEL, self.counter)


def _free_arrays(fleet: FleetState) -> Arrays:
    n = fleet.n_rows
    return (
        fleet.cpu_free[:n].copy(),
        fleet.mem_free[:n].copy(),
        fleet.gpu_free[:n].copy(),
        fleet.mig_free[:n].copy(),
        fleet.gpu_ok[:n].astype(np.int64),
    )


def _shapes(arrays: Arrays) -> tuple[tuple[int, ...], ...]:
    return tuple(a.shape for a in arrays)


def _rows_rose(before: Arrays, after: Arrays) -> npt.NDArray[np.intp]:
    rose = np.zeros(after[0].shape[0], dtype=np.bool_)
    for old, new in zip(before, after, strict=True):
        grew = new > old
        rose |= grew if grew.ndim == 1 else grew.any(axis=1)
    return np.flatnonzero(rose)


class ParkingLot:
    """The parked workloads of one cache, and the capacity watch their wake-ups read.

    Besides `entries` (by name), the lot keeps them by queue and user, with what a cycle reads of each
    queue as a whole: the pending decisions to repeat, the wake-up keys its workloads wait on, and each
    user's first parked workload in queue order (the order inside a user does not move with fair
    shares). A cycle over tens of thousands of parked workloads then works per queue, not per workload.
    All changes go through `park`, `unpark` and `clear`.
    """

    def __init__(self) -> None:
        self.entries: dict[str, ParkedWorkload] = {}
        self.capacity = CapacityWatch()
        self.by_queue: dict[str, dict[str, dict[str, ParkedWorkload]]] = {}
        """queue -> user -> name -> entry."""
        self.decisions: dict[str, dict[str, Pending]] = {}
        """queue -> name -> the decision repeated for it."""
        self.wake_keys: dict[str, dict[tuple[tuple[str, int], ...], Mapping[str, int]]] = {}
        """queue -> every need key parked there (a superset once entries leave) -> its usage."""
        self.model_watchers: dict[str, int] = {}
        """queue -> how many of its entries wait for a new GPU model."""
        self._first: dict[tuple[str, str], ParkedWorkload] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def park(self, entry: ParkedWorkload) -> None:
        workload = entry.workload
        if workload.name in self.entries:
            self.unpark(workload.name)
        queue, user = workload.queue, workload.user
        self.entries[workload.name] = entry
        self.by_queue.setdefault(queue, {}).setdefault(user, {})[workload.name] = entry
        self.decisions.setdefault(queue, {})[workload.name] = entry.pending
        keys = self.wake_keys.setdefault(queue, {})
        for need in entry.needs:
            keys.setdefault(need.key, need.usage)
        if entry.models_known is not None:
            self.model_watchers[queue] = self.model_watchers.get(queue, 0) + 1
        first = self._first.get((queue, user))
        if first is not None and _in_queue_order(workload) < _in_queue_order(first.workload):
            self._first[(queue, user)] = entry

    def unpark(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is None:
            return
        queue, user = entry.workload.queue, entry.workload.user
        users = self.by_queue[queue]
        del users[user][name]
        if not users[user]:
            del users[user]
            if not users:
                del self.by_queue[queue]
                self.wake_keys.pop(queue, None)
        decisions = self.decisions[queue]
        del decisions[name]
        if not decisions:
            del self.decisions[queue]
        if entry.models_known is not None:
            self.model_watchers[queue] -= 1
            if not self.model_watchers[queue]:
                del self.model_watchers[queue]
        first = self._first.get((queue, user))
        if first is entry:
            del self._first[(queue, user)]

    def wake(
        self,
        pending: Mapping[str, Workload],
        usage: QuotaUsage,
        models: int,
        user_fits: Callable[[Workload, Mapping[str, int]], bool],
    ) -> None:
        """Unparks the workloads whose wait may be over, at the start of a cycle: those the world
        admitted, removed or replaced (no longer `pending` as parked), and those whose quota or capacity
        may now let them start (`models`: how many GPU models the fleet knows now; `user_fits`: the
        per-user limit).

        Per queue: a workload wakes only when its quota fits one of its needs, so a queue where none of
        the needs parked there fits is passed over without looking at its workloads."""
        capacity = self.capacity
        for name in [n for n, entry in self.entries.items() if pending.get(n) is not entry.workload]:
            self.unpark(name)
        woken: list[str] = []
        for queue, keys in self.wake_keys.items():
            fitting = {key for key, amounts in keys.items() if usage.fits(queue, amounts) is None}
            if not fitting and queue not in self.model_watchers:
                continue
            for users in self.by_queue[queue].values():
                for name, entry in users.items():
                    if entry.models_known is not None and models > entry.models_known:
                        woken.append(name)
                        continue
                    for need in entry.needs:
                        if (
                            need.key in fitting
                            and (not need.quota_fitted or capacity.rose_since(need.model, entry.mark))
                            and user_fits(entry.workload, need.usage)
                        ):
                            woken.append(name)
                            break
        for name in woken:
            self.unpark(name)

    def clear(self) -> None:
        """Wakes everything (e.g. after the world changed queue settings in place)."""
        self.entries.clear()
        self.by_queue.clear()
        self.decisions.clear()
        self.wake_keys.clear()
        self.model_watchers.clear()
        self._first.clear()

    def first_of(self, queue: str, user: str) -> ParkedWorkload:
        """The user's parked workload that comes first in the queue's order (priority, submission, name)."""
        found = self._first.get((queue, user))
        if found is None:
            found = min(self.by_queue[queue][user].values(), key=lambda e: _in_queue_order(e.workload))
            self._first[(queue, user)] = found
        return found

    def get(self, workload: Workload) -> ParkedWorkload | None:
        """The entry for this very workload; a replaced (changed) workload is not parked."""
        entry = self.entries.get(workload.name)
        if entry is None:
            return None
        if entry.workload is not workload and entry.workload != workload:
            self.unpark(workload.name)
            return None
        return entry


def _in_queue_order(workload: Workload) -> tuple[int, float, str]:
    """A leaf queue's order among one user's workloads (cycle.py's order without the user's share)."""
    return -workload.priority, workload.submitted_at, workload.name
