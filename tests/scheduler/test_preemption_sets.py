"""Victim sets: the reclaim exception for an indivisible gang, shrinks by the pods needed, the greedy
fallback beyond the exact search's bound."""

from __future__ import annotations

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.preemption.search import EXACT_WORKLOADS
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def _cache(nodes: int, gpus: int, quotas: dict[str, int]) -> ClusterCache:
    fleet = FleetState()
    for i in range(nodes):
        fleet.add_node(NodeSpec(f"n{i}", H100, gpus, 64_000 * gpus, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree(
        [QuotaNode("root")]
        + [QuotaNode(name, "root", {H100: FlavorLimits(gpus * 1000)}) for name, gpus in quotas.items()]
    )
    settings = {name: QueueSettings(name) for name in tree.nodes}
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _job(
    name: str, queue: str, gpus: int, *, pods: int = 1, min_count: int | None = None, priority: int = 0
) -> Workload:
    request = PodRequest(cpu_milli=1000, memory_mib=1024, gpus=gpus)
    return Workload(
        name, (PodSet("main", pods, request, min_count=min_count),), queue=queue, priority=priority
    )


def _cycle(cache: ClusterCache, now: float) -> CycleResult:
    result = Scheduler().cycle(cache, now=now)
    apply_decisions(cache, result, now=now)
    return result


def test_a_queue_may_lose_its_only_borrowing_gang_when_nothing_else_frees_room() -> None:
    # b (nominal 2) runs one 6-GPU gang: it borrows 4, and only the whole gang frees a's nominal 6.
    cache = _cache(1, 8, {"a": 6, "b": 2})
    cache.submit(_job("gang", "b", 6))
    _cycle(cache, now=0.0)
    cache.submit(_job("in", "a", 6))
    result = _cycle(cache, now=10.0)
    assert [(p.victim, p.whole) for p in result.preempted] == [("gang", True)]


def test_an_elastic_victim_loses_its_highest_pods_only_as_many_as_needed() -> None:
    cache = _cache(4, 8, {"q": 32})
    cache.submit(_job("el", "q", 8, pods=4, min_count=1))
    _cycle(cache, now=0.0)
    cache.submit(_job("in", "q", 8, pods=2, priority=10))
    result = _cycle(cache, now=10.0)
    [shrink] = result.preempted
    assert (shrink.victim, shrink.whole) == ("el", False)
    assert sorted(shrink.pods) == ["el/main/2", "el/main/3"]
    assert shrink.counts == (2,)


def test_a_scope_beyond_the_exact_bound_still_finds_a_set() -> None:
    # More one-GPU jobs on the node than the exact search takes: the greedy minimal set answers.
    jobs = EXACT_WORKLOADS + 4
    cache = _cache(1, jobs, {"q": jobs})
    for i in range(jobs):
        cache.submit(_job(f"j{i:02d}", "q", 1))
    _cycle(cache, now=0.0)
    assert len(cache.admitted) == jobs
    cache.submit(_job("in", "q", 2, priority=10))
    result = _cycle(cache, now=10.0)
    assert len(result.preempted) == 2
    assert all(p.whole for p in result.preempted)
    assert result.nominated == ["in"]


def test_beyond_the_exact_bound_an_elastic_victim_still_gives_up_only_the_pods_needed() -> None:
    # 15 workloads in the fleet-wide scope of a two-pod preemptor: the greedy search, then the trim.
    rigid = EXACT_WORKLOADS + 2
    cache = _cache(rigid + 4, 8, {"q": 8 * (rigid + 4)})
    cache.submit(_job("el", "q", 8, pods=4, min_count=1))
    for i in range(rigid):
        cache.submit(_job(f"r{i:02d}", "q", 8))
    _cycle(cache, now=0.0)
    assert len(cache.admitted) == rigid + 1
    cache.submit(_job("in", "q", 8, pods=2, priority=10))
    result = _cycle(cache, now=10.0)
    [shrink] = result.preempted
    assert (shrink.victim, sorted(shrink.pods), shrink.counts) == ("el", ["el/main/2", "el/main/3"], (2,))


def test_beyond_the_exact_bound_reclaim_keeps_the_lender_at_nominal() -> None:
    # c (nominal 14) holds 20: evicting c-big (7 GPUs, least lost work) would leave it at 13; two of
    # its one-GPU jobs leave it at 18.
    smalls = EXACT_WORKLOADS + 1
    cache = _cache(1, 20, {"a": 4, "b": 2, "c": 14})
    cache.submit(_job("c-big", "c", 7))
    for i in range(smalls):
        cache.submit(_job(f"c-s{i:02d}", "c", 1))
    _cycle(cache, now=0.0)
    assert len(cache.admitted) == smalls + 1
    cache.checkpoint("c-big", now=4990.0)
    cache.submit(_job("in", "a", 1, pods=2))
    result = _cycle(cache, now=5000.0)
    assert sorted(p.victim for p in result.preempted) == ["c-s00", "c-s01"]
