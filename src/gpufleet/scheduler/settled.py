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
- the workload that heads each leaf queue's parked ones would be passed over at its queue's turn
  without an attempt: its victim memo matches the cache as it is now. Which user's first parked
  workload heads a queue moves with the users' fair-share history: either each user's first has a
  memo that holds, or the head is shown to stay the head. A user's share from now on is
  `used + weight * (level + (average - level) * d)`, linear in the decay factor d, which goes from 1
  (now) towards 0, so a head that comes first both now and in the limit comes first at every time in
  between; a gap between two shares thinner than rounding could blur is not trusted.

Waking a parked workload reads quota, capacity and the fleet's models only, never time (parking.py).
"The same cache" is what `stamp` tells: the waiting workloads, the quota used, the nodes and the
allocations on them. A world runs a pass at every change it sees, and compares stamps besides, so that
a change of the cache it did not count as one still ends the settled state.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.outcome import CycleResult
from gpufleet.scheduler.parking import ParkedWorkload
from gpufleet.scheduler.queueing import FairShare, queue_order, user_key

MARGIN = 1e-9
"""The least gap between two users' shares, relative to them, that is trusted to keep its sign."""


def settled(
    result: CycleResult,
    cache: ClusterCache,
    fair: FairShare,
    time_moves_victims: bool,
    memo_holds: Callable[[ParkedWorkload], bool],
) -> bool:
    """True when a cycle on the same cache at any later time would attempt and decide nothing.

    `fair`: the cycle's fair shares (its time and fair-sharing settings); `time_moves_victims`: some
    queue has a minimum runtime; `memo_holds`: whether a parked workload's victim memo matches the
    cache now (the cycle's own test when the workload reaches its turn)."""
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
        firsts = [parking.first_of(queue, user) for user in by_user]
        if all(memo_holds(first) for first in firsts):
            continue
        head = _lasting_head(cache, fair, queue, firsts)
        if head is None or not memo_holds(head):
            return False
    return True


def _lasting_head(
    cache: ClusterCache, fair: FairShare, queue: str, firsts: list[ParkedWorkload]
) -> ParkedWorkload | None:
    """The users' first parked workload that heads the queue now and at every later time while the
    cache stays as it is (the order of the cycle's `_heads`), or None when that is not shown."""
    if len(firsts) == 1:
        return firsts[0]
    weight = fair.fair.history_weight
    used = {e.workload.user: cache.user_used(queue, e.workload.user) for e in firsts}
    courses = {user: cache.history.course(user_key(queue, user), "*") for user in used}
    if any(course is not None and course[2] > fair.now for course in courses.values()):
        return None  # usage recorded after this cycle's time: its decay has not begun, not linear
    now = {user: cache.user_share(queue, user, weight, fair.now) for user in used}
    limit = {user: cache.user_share(queue, user, weight, math.inf) for user in used}
    in_order_now, in_order_later = queue_order(now), queue_order(limit)
    head = min(firsts, key=lambda e: in_order_now(e.workload))
    if head is not min(firsts, key=lambda e: in_order_later(e.workload)):
        return None
    lead = head.workload
    for entry in firsts:
        other = entry.workload
        if entry is head or other.priority != lead.priority:
            continue  # priority orders them whatever the shares
        if used[other.user] == used[lead.user] and courses[other.user] == courses[lead.user]:
            continue  # the same share at every time: submission and name keep the order
        for shares in (now, limit):
            gap = shares[other.user] - shares[lead.user]
            if gap <= MARGIN * max(1.0, abs(shares[other.user]), abs(shares[lead.user])):
                return None
    return head


def stamp(cache: ClusterCache) -> tuple[int, int, int, int]:
    """Changes whenever a workload leaves the waiting ones, quota usage changes, nodes change or an
    allocation is made or released (joined or replaced waiting workloads change it with the rest)."""
    fleet = cache.fleet
    return (len(cache.pending), cache.usage.version, fleet.generation, fleet.touched.mark())
