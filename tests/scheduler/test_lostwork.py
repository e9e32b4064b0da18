"""Lost work: one rule, from the later of the attempt's start and a checkpoint taken during it, for
ranking victims and for what an eviction records."""

from __future__ import annotations

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.lostwork import attempt_start, lost_gpu_seconds
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def test_work_counts_from_a_checkpoint_taken_during_the_attempt() -> None:
    assert lost_gpu_seconds(16_000, 100.0, 130.0, now=170.0) == 16 * 40


def test_a_checkpoint_from_an_earlier_attempt_saves_nothing_of_this_one() -> None:
    # The attempt resumed from the checkpoint at 50: all it did since 100 is lost.
    assert lost_gpu_seconds(8_000, 100.0, 50.0, now=140.0) == 8 * 40
    assert lost_gpu_seconds(8_000, 100.0, None, now=140.0) == 8 * 40


def test_an_attempt_that_never_started_or_just_checkpointed_loses_nothing() -> None:
    assert lost_gpu_seconds(8_000, None, 50.0, now=140.0) == 0.0
    assert lost_gpu_seconds(8_000, 100.0, 140.0, now=140.0) == 0.0
    assert lost_gpu_seconds(500, 100.0, None, now=104.0) == 2.0  # a half GPU for 4 s


def test_an_attempt_starts_with_its_first_pod_else_at_its_admission() -> None:
    assert attempt_start([None, 120.0, 110.0], admitted_at=100.0) == 110.0
    assert attempt_start([None, None], admitted_at=100.0) == 100.0
    assert attempt_start([], admitted_at=None) is None


def _cache() -> ClusterCache:
    fleet = FleetState()
    for i in range(2):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 512_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree([QuotaNode("root"), QuotaNode("q", "root", {H100: FlavorLimits(16_000)})])
    settings = {name: QueueSettings(name) for name in tree.nodes}
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _job(name: str, *, priority: int = 0, checkpoint: float | None = None) -> Workload:
    request = PodRequest(cpu_milli=1000, memory_mib=1024, gpus=8)
    return Workload(
        name, (PodSet("main", 1, request),), queue="q", priority=priority, last_checkpoint_at=checkpoint
    )


def _cycle(cache: ClusterCache, now: float) -> CycleResult:
    result = Scheduler().cycle(cache, now=now)
    apply_decisions(cache, result, now=now)
    return result


def test_the_victim_is_ranked_by_the_work_of_its_current_attempt() -> None:
    cache = _cache()
    cache.submit(_job("fresh"))
    _cycle(cache, now=0.0)
    # Restarted from a checkpoint written long before this attempt was admitted at 100.
    cache.submit(_job("resumed", checkpoint=-1000.0))
    _cycle(cache, now=100.0)
    assert set(cache.admitted) == {"fresh", "resumed"}
    cache.submit(_job("urgent", priority=10))
    result = _cycle(cache, now=200.0)
    # resumed has run 100 s (800 GPU-seconds), fresh 200 s (1,600): resumed is cheaper to lose.
    assert [(p.victim, p.lost_gpu_seconds) for p in result.preempted] == [("resumed", 800.0)]
