"""An elastic preemptor's count (docs/scheduling.md decision 30): the class of a count's cheapest set
(keeps every other queue at nominal, then shrinks only) before the number of pods."""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.scheduler.cache import Admitted
from gpufleet.scheduler.preemption import RECLAIM, Candidate, VictimSet, choose_count
from gpufleet.scheduler.preemption.order import Kind


def _set(kind: Kind, below_nominal: int = 0) -> VictimSet:
    admitted = Admitted.__new__(Admitted)  # the choice reads only the candidates' kinds
    candidate = Candidate(admitted=admitted, kind=kind, cause=RECLAIM, lost_gpu_seconds=0.0)
    return VictimSet("p", (candidate,), below_nominal=below_nominal)


def _chooser(sets: dict[int, VictimSet]) -> tuple[list[int], Callable[[int], VictimSet | None]]:
    asked: list[int] = []

    def victims_at(step: int) -> VictimSet | None:
        asked.append(step)
        return sets.get(step)

    return asked, victims_at


def test_the_full_count_stands_when_its_set_is_of_the_best_class() -> None:
    shrink = _set("shrink")
    asked, victims_at = _chooser({0: shrink, 1: shrink, 2: shrink})
    assert choose_count(2, victims_at) == (0, shrink)
    assert asked == [0]  # nothing else searched


def test_fewer_pods_when_the_full_count_has_no_set() -> None:
    evict = _set("evict")
    _, victims_at = _chooser({2: evict, 3: evict, 4: evict})
    assert choose_count(4, victims_at) == (2, evict)


def test_fewer_pods_when_their_set_keeps_every_queue_at_nominal() -> None:
    below, at = _set("evict", below_nominal=1), _set("evict")
    _, victims_at = _chooser({0: below, 1: below, 2: at, 3: at})
    assert choose_count(3, victims_at) == (2, at)


def test_fewer_pods_when_their_set_only_shrinks() -> None:
    evict, shrink = _set("evict"), _set("shrink")
    _, victims_at = _chooser({0: evict, 1: shrink, 2: shrink})
    assert choose_count(2, victims_at) == (1, shrink)


def test_the_most_pods_among_sets_of_one_class() -> None:
    evict = _set("evict")
    _, victims_at = _chooser({0: evict, 1: evict, 2: evict})
    assert choose_count(2, victims_at) == (0, evict)


def test_no_count_with_a_set_is_none() -> None:
    _, victims_at = _chooser({})
    assert choose_count(3, victims_at) is None
    assert choose_count(0, victims_at) is None
