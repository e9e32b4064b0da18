"""Counts: at how many pods an elastic preemptor is admitted through preemption (docs/scheduling.md
decision 30; KAI's elastic reclaim).

An elastic workload may take fewer pods than its maximum, down to its `minCount`. Its counts are
compared by the class of their cheapest victim sets first, then by pods:

1. a set that leaves every other queue at or above its nominal quota beats one that does not (decision
   8: a lender is not pushed below its nominal quota to give a preemptor pods it can do without);
2. then a set that only shrinks elastic victims beats one that evicts a workload whole (decision 7: no
   workload is evicted whole for pods the preemptor can do without);
3. then the most pods; that count's cheapest set (decision 9).

A count with no set at all ranks last. Fewer pods never need more than more pods do (the victims of a
larger count free enough for a smaller one), so the class of a count's best set only improves as the
count falls: the least count tells the best class there is, and a binary search over the shrink steps
finds the most pods with it. The full count is tried first, and when its set is already of the best
class (or the workload is not elastic) nothing else is searched.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.scheduler.preemption.order import VictimSet

SetClass = tuple[int, int]
"""(below nominal, evicts): the parts of a set's rank that outrank the preemptor's pod count."""

BEST: SetClass = (0, 0)


def set_class(victims: VictimSet) -> SetClass:
    """The class of a set: decision 8's flag, then whether it evicts anything whole."""
    return victims.below_nominal, 1 if any(c.kind == "evict" for c in victims.victims) else 0


def choose_count(steps: int, victims_at: Callable[[int], VictimSet | None]) -> tuple[int, VictimSet] | None:
    """The shrink step (0: the full count) to admit the preemptor at and its victims, or None when no
    count has a set. `steps`: how far the preemptor can shrink (0 when it is not elastic);
    `victims_at(step)`: the cheapest set for that step's counts, or None."""
    full = victims_at(0)
    if steps == 0 or (full is not None and set_class(full) == BEST):
        return None if full is None else (0, full)
    least = victims_at(steps)
    if least is None or (full is not None and set_class(least) >= set_class(full)):
        return None if full is None else (0, full)
    wanted = set_class(least)
    found = least
    low, high = 0, steps  # the fewest steps with a set of the wanted class: none at low, one at high
    while high - low > 1:
        mid = (low + high) // 2
        got = victims_at(mid)
        if got is not None and set_class(got) <= wanted:
            high, found = mid, got
        else:
            low = mid
    return high, found
