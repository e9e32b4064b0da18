"""Victim search over scopes: the scopes' bounds never exceed what their search finds, so stopping early
at the bound picks the same set as searching every scope."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler import preemption
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.preemption.bounds import quick_bound
from gpufleet.scheduler.preemption.feasibility import capacity_feasible, quota_feasible
from gpufleet.scheduler.preemption.scopes import scopes_of
from gpufleet.scheduler.preemption.search import Search, leaves_within, search_phases
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def _cache(nodes: int, quotas: dict[str, int]) -> ClusterCache:
    fleet = FleetState()
    for i in range(nodes):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 512_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree(
        [QuotaNode("root")]
        + [QuotaNode(name, "root", {H100: FlavorLimits(gpus * 1000)}) for name, gpus in quotas.items()]
    )
    settings = {name: QueueSettings(name) for name in tree.nodes}
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


def _every_scope(
    snapshot: Any,
    preemptor: Workload,
    assignment: Any,
    fits: Any,
    now: float,
    pool: Sequence[Any],
    strict: bool = False,
) -> tuple[preemption.SetRank, preemption.VictimSet] | None:
    """The best key and set over every scope, each searched (no bound, no scope limit); checks each
    bound."""
    search = Search(snapshot, preemptor, assignment, fits, now, pool, strict=strict)
    best = None
    for scope in scopes_of(snapshot, preemptor, pool):
        bound = max(quick_bound(scope.candidates), search.bounds.scope_bound(scope))
        found = search.scope(scope)
        if found is None:
            continue
        key = preemption.SetRank(0 if search.keeps_nominal(found.victims) else 1, found.cost())
        assert bound <= key, (scope.node, bound, key)
        if best is None or key < best[0]:
            best = (key, found)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_stopping_at_the_bound_finds_the_cheapest_set_of_every_scope(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    cache = _cache(4, {"a": 12, "b": 12, "c": 8})
    t = 0.0
    for i in range(24):
        gpus = rng.choice((1, 1, 2, 4))
        pods = rng.choice((1, 1, 2))
        elastic = 1 if pods > 1 and rng.random() < 0.5 else None
        queue = rng.choice("abc")
        cache.submit(_job(f"w{i:02d}", queue, gpus, pods, elastic, rng.choice((1, 2)), t))
        t += 1.0
    checked = []
    original = preemption.select_victims

    def spy(snapshot: Any, preemptor: Workload, assignment: Any, fits: Any, **kwargs: Any) -> Any:
        pool = kwargs.get("pool")
        now = kwargs["now"]
        if pool is None:
            pool = preemption.candidates(snapshot, preemptor, assignment, now=now)
        expected = fallback = None
        # The pools in the order the search takes them (decisions 29 and 37), the first with a set wins.
        for phase in search_phases(snapshot, preemptor, assignment, pool):
            part = phase.pool
            if (
                part
                and quota_feasible(snapshot, preemptor, assignment, part)
                and capacity_feasible(snapshot, preemptor, assignment, part)
            ):
                best = _every_scope(snapshot, preemptor, assignment, fits, now, part, phase.strict)
                expected = None if best is None else best[0]
                if (
                    best is not None
                    and phase.within_only
                    and not leaves_within(snapshot, preemptor, assignment, best[1])
                ):
                    fallback, expected = expected, None
            if expected is not None:
                break
        expected = expected or fallback
        found = original(snapshot, preemptor, assignment, fits, now=now, pool=pool, max_scopes=1_000)
        search = Search(snapshot, preemptor, assignment, fits, now, pool)  # keeps_nominal: no phase used
        key = (
            None
            if found is None
            else preemption.SetRank(0 if search.keeps_nominal(found.victims) else 1, found.cost())
        )
        assert key == expected
        checked.append(key)
        return found

    monkeypatch.setattr(cycle_module, "select_victims", spy)
    scheduler = Scheduler()
    now = 100.0
    for step in range(3):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        now += 50.0
        for j in range(2):
            gpus = rng.choice((1, 2, 4, 8))
            cache.submit(_job(f"hi{step}-{j}", rng.choice("abc"), gpus, 1, None, 10, now))
    for _ in range(3):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        now += 50.0
    assert any(key is not None for key in checked)  # a preemption was decided and compared
