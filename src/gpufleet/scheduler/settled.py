"""Whether a cycle's outcome stands until the cache changes: the periodic pass a world may spare.

A world runs a pass at every change and, while anything waits, again every so often: the periodic
pass is for the rules that move with time alone (fair-share history, minimum runtimes, attained
service). On a fleet that stays full that pass is most passes, and it finds what the last one found.
A cycle that decided nothing says whether the next one, on the same cache at any later time, would
attempt nothing either (`CycleResult.settled`), so that the world may skip it:

- nothing waits outside the parking lot: a workload that is not parked is attempted every cycle (a
  strict-FIFO or least-attained-service queue never parks, since its order moves with time), and an
  entry holding another object than the cache's pending workload is woken at the next cycle;
- no queue has a minimum runtime: a parked workload's preemption search then depends on time;
- every parked user's first workload in each leaf queue would be passed over at its queue's turn
  without an attempt: its victim memo matches the cache as it is now. Which user's first heads a
  queue moves with the users' fair-share history, so each one that could is checked.

Waking a parked workload reads quota, capacity and the fleet's models only, never time (parking.py).
"The same cache" is what `stamp` tells: the waiting workloads, the quota used, the nodes and the
allocations on them. A world runs a pass at every change it sees, and compares stamps besides, so that
a change of the cache it did not count as one still ends the settled state.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.outcome import CycleResult
from gpufleet.scheduler.parking import ParkedWorkload


def settled(
    result: CycleResult,
    cache: ClusterCache,
    time_moves_victims: bool,
    memo_holds: Callable[[ParkedWorkload], bool],
) -> bool:
    """True when a cycle on the same cache at any later time would attempt and decide nothing.

    `time_moves_victims`: some queue has a minimum runtime; `memo_holds`: whether a parked workload's
    victim memo matches the cache now (the cycle's own test when the workload reaches its turn)."""
    if result.changed or result.nominated or time_moves_victims:
        return False
    parking = cache.parking
    pending = cache.pending
    if len(parking.entries) != len(pending):
        return False
    if any(pending.get(name) is not entry.workload for name, entry in parking.entries.items()):
        return False
    tree = cache.tree
    for queue, by_user in parking.by_queue.items():
        if queue not in tree.nodes or not tree.is_leaf(queue):
            continue  # its workloads are told their queue is no leaf, and never attempted
        if not all(memo_holds(parking.first_of(queue, user)) for user in by_user):
            return False
    return True


def stamp(cache: ClusterCache) -> tuple[int, int, int, int]:
    """Changes whenever a workload leaves the waiting ones, quota usage changes, nodes change or an
    allocation is made or released (joined or replaced waiting workloads change it with the rest)."""
    fleet = cache.fleet
    return (len(cache.pending), cache.usage.version, fleet.generation, fleet.touched.mark())
