"""The parking lot's per-queue index stays in step with its entries through park, unpark and clear."""

from __future__ import annotations

import numpy as np

from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.explain import Pending, Reason
from gpufleet.scheduler.parking import FlavorNeed, ParkedWorkload, ParkingLot
from gpufleet.scheduler.workload import PodSet, Workload


def _entry(name: str, queue: str, user: str, priority: int, at: float, gpus: int) -> ParkedWorkload:
    workload = Workload(
        name,
        (PodSet("main", 1, PodRequest(gpus=gpus)),),
        queue=queue,
        priority=priority,
        user=user,
        submitted_at=at,
    )
    reason = Reason("QuotaExceeded", "full")
    need = FlavorNeed("H100-80GB", {"H100-80GB": 1000 * gpus}, False)
    return ParkedWorkload(workload, reason, (need,), 0, None, Pending(name, reason))


def _check(lot: ParkingLot) -> None:
    by_queue: dict[str, dict[str, set[str]]] = {}
    for name, entry in lot.entries.items():
        by_queue.setdefault(entry.workload.queue, {}).setdefault(entry.workload.user, set()).add(name)
    assert {q: {u: set(n) for u, n in users.items()} for q, users in lot.by_queue.items()} == by_queue
    assert {q: set(d) for q, d in lot.decisions.items()} == {
        q: {n for names in users.values() for n in names} for q, users in by_queue.items()
    }
    for queue, users in by_queue.items():
        keys = {need.key for n in set().union(*users.values()) for need in lot.entries[n].needs}
        assert keys <= set(lot.wake_keys[queue])
        for user, names in users.items():
            first = min(
                names,
                key=lambda n: (-lot.entries[n].workload.priority, lot.entries[n].workload.submitted_at, n),
            )
            assert lot.first_of(queue, user).workload.name == first


def test_index_follows_random_parks_and_unparks() -> None:
    rng = np.random.default_rng(3)
    lot = ParkingLot()
    names = [f"w{i}" for i in range(60)]
    for step in range(600):
        name = names[int(rng.integers(len(names)))]
        if rng.random() < 0.6:
            lot.park(
                _entry(
                    name,
                    f"q{int(rng.integers(3))}",
                    f"u{int(rng.integers(3))}",
                    int(rng.choice([0, 10, 100])),
                    float(rng.integers(50)),
                    int(rng.choice([1, 2, 8])),
                )
            )
        else:
            lot.unpark(name)
        if step % 7 == 0:
            _check(lot)
        if step == 300:
            lot.clear()
            assert not lot.by_queue and not lot.decisions and not lot.wake_keys and not lot.entries
    _check(lot)
