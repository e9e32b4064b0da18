"""The preemptor's candidate pool as kept per queue (sorted and grouped per node once, shared by every
preemptor that takes a queue's list whole) decides exactly as the plain sorted list of candidates: the
same pool in the same order, the same victims, and the same placements tried on the way (placement
draws from the scheduler's random generator, so one extra try would change later decisions)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler import preemption
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def _cache(rng: random.Random) -> ClusterCache:
    fleet = FleetState()
    for i in range(6):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 512_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    quotas = {"a": 12, "b": 12, "c": 8, "d": 16}
    tree = QuotaTree(
        [QuotaNode("root")]
        + [QuotaNode(name, "root", {H100: FlavorLimits(gpus * 1000)}) for name, gpus in quotas.items()]
    )
    # Some queues take other queues' workloads whole (reclaim `Any`), others filter them per preemptor
    # (`LowerPriority`) or keep young workloads (a minimum runtime): both ways of building the pool.
    settings = {
        name: QueueSettings(
            name,
            preemption=PreemptionPolicy(reclaim_within_cohort=rng.choice(("Any", "Any", "LowerPriority"))),
            min_runtime_seconds=rng.choice((0.0, 0.0, 60.0)),
        )
        for name in tree.nodes
    }
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _job(
    name: str, queue: str, gpus: int, pods: int, min_count: int | None, priority: int, at: float
) -> Workload:
    request = PodRequest(cpu_milli=1000, memory_mib=1024, gpus=gpus)
    return Workload(
        name,
        (PodSet("main", pods, request, min_count=min_count),),
        queue=queue,
        priority=priority,
        submitted_at=at,
    )


def _victims(found: preemption.VictimSet | None) -> list[tuple[str, str, tuple[str, ...]]] | None:
    return None if found is None else [(c.name, c.kind, c.pods) for c in found.victims]


@pytest.mark.parametrize("seed", range(30))
def test_the_kept_pool_decides_as_the_sorted_list(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    cache = _cache(rng)
    t = 0.0
    for i in range(30):
        pods = rng.choice((1, 1, 1, 2))
        elastic = 1 if pods > 1 and rng.random() < 0.5 else None
        job = _job(
            f"w{i:02d}", rng.choice("abcd"), rng.choice((1, 1, 2, 4)), pods, elastic, rng.choice((1, 2)), t
        )
        cache.submit(job)
        t += 1.0
    compared = []
    original = preemption.select_victims

    def spy(snapshot: Any, preemptor: Workload, assignment: Any, fits: Any, **kwargs: Any) -> Any:
        now = kwargs["now"]
        pool = preemption.candidates(snapshot, preemptor, assignment, now=now)
        plain = sorted(pool, key=preemption.victim_order)
        assert list(pool) == plain
        assert isinstance(pool, preemption._Pool)
        assert list(pool.in_order()) == plain

        def counted(calls: list[int]) -> Any:
            def fits_counted() -> bool:
                calls.append(1)
                return bool(fits())

            return fits_counted

        from_list: list[int] = []
        expected = original(snapshot, preemptor, assignment, counted(from_list), now=now, pool=plain)
        from_pool: list[int] = []
        found = original(snapshot, preemptor, assignment, counted(from_pool), now=now, pool=pool)
        assert _victims(found) == _victims(expected)
        assert len(from_pool) == len(from_list)
        compared.append(found is not None)
        return found

    monkeypatch.setattr(cycle_module, "select_victims", spy)
    scheduler = Scheduler()
    now = 100.0
    for step in range(4):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        now += 50.0
        for j in range(3):
            gpus = rng.choice((1, 2, 4, 8))
            pods = rng.choice((1, 1, 2))
            cache.submit(
                _job(f"hi{step}-{j}", rng.choice("abcd"), gpus, pods, None, rng.choice((2, 10)), now)
            )
    for _ in range(3):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        now += 50.0
    assert any(compared)  # a preemption was decided both ways
