"""Least-attained-service queues (Tiresias' discretised 2D-LAS): levels by GPU-seconds run, FIFO inside
a level, a lower level preempting a higher one, and the starvation rule."""

from __future__ import annotations

import pytest

from gpufleet.api.queue import Queue
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.attained import LasSettings, Service, level, waiting_level
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.queueing import QueueingStrategy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.settings import queue_settings
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
HOUR = 3600.0
LAS = LasSettings(thresholds=(1 * HOUR, 16 * HOUR), promote_factor=4.0)


def _cache(strategy: QueueingStrategy, nodes: int = 1) -> ClusterCache:
    fleet = FleetState()
    for i in range(nodes):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree([QuotaNode("q", None, {H100: FlavorLimits(8000 * nodes)})])
    settings = {"q": QueueSettings("q", strategy=strategy, las=LAS)}
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _job(name: str, gpus: int, at: float) -> Workload:
    return Workload(name, (PodSet("main", 1, PodRequest(gpus=gpus)),), queue="q", submitted_at=at)


def _settle(cache: ClusterCache, now: float) -> CycleResult:
    scheduler = Scheduler()
    result = CycleResult()
    for _ in range(10):
        result = scheduler.cycle(cache, now=now)
        apply_decisions(cache, result, now=now)
        if not result.changed:
            break
    return result


def test_levels_follow_the_thresholds_in_gpu_seconds() -> None:
    assert [level(LAS, s) for s in (0, HOUR - 1, HOUR, 16 * HOUR - 1, 16 * HOUR, 1e9)] == [0, 0, 1, 1, 2, 2]


def test_a_waiting_job_is_promoted_after_waiting_factor_times_its_run() -> None:
    ran = Service(gpu_seconds=8 * 2 * HOUR, run_seconds=2 * HOUR, stopped_at=100.0)
    assert waiting_level(LAS, ran, submitted_at=0.0, now=100.0 + 8 * HOUR - 1) == 2
    assert waiting_level(LAS, ran, submitted_at=0.0, now=100.0 + 8 * HOUR) == 0
    never = LasSettings(thresholds=(HOUR,), promote_factor=None)
    assert waiting_level(never, ran, submitted_at=0.0, now=1e9) == 1


def test_a_new_job_preempts_one_that_has_run_past_a_threshold() -> None:
    cache = _cache(QueueingStrategy.LEAST_ATTAINED_SERVICE)
    cache.submit(_job("long", 8, at=0.0))
    _settle(cache, now=0.0)
    assert set(cache.admitted) == {"long"}
    cache.submit(_job("short", 8, at=10.0))
    # After 8 GPUs x 30 min = 4 GPU-hours, `long` is at level 1 and `short` (none yet) at level 0.
    _settle(cache, now=1800.0)
    assert set(cache.admitted) == {"short"}
    assert "long" in cache.pending
    assert cache.service.of("long").gpu_seconds == pytest.approx(8 * 1800.0)


def test_best_effort_fifo_does_not_preempt_an_equal_priority_job() -> None:
    cache = _cache(QueueingStrategy.BEST_EFFORT_FIFO)
    cache.submit(_job("long", 8, at=0.0))
    _settle(cache, now=0.0)
    cache.submit(_job("short", 8, at=10.0))
    _settle(cache, now=1800.0)
    assert set(cache.admitted) == {"long"}


def test_the_least_served_waiting_job_starts_first_fifo_within_a_level() -> None:
    cache = _cache(QueueingStrategy.LEAST_ATTAINED_SERVICE)
    cache.submit(_job("veteran", 8, at=0.0))
    _settle(cache, now=0.0)
    cache.submit(_job("a", 8, at=5.0))
    cache.submit(_job("b", 8, at=6.0))
    _settle(cache, now=2 * HOUR)  # `a` preempts the veteran (16 GPU-hours: level 2)
    assert set(cache.admitted) == {"a"}
    cache.finish("a", now=2 * HOUR + 60)
    _settle(cache, now=2 * HOUR + 60)  # `b` (level 0) before the earlier-submitted veteran
    assert set(cache.admitted) == {"b"}
    assert cache.service.of("a") == Service()  # a finished job's service is forgotten


def test_a_starved_job_is_promoted_and_takes_its_gpus_back() -> None:
    cache = _cache(QueueingStrategy.LEAST_ATTAINED_SERVICE)
    cache.submit(_job("veteran", 8, at=0.0))
    _settle(cache, now=0.0)
    cache.submit(_job("newcomer", 8, at=HOUR))
    _settle(cache, now=HOUR)  # the veteran (8 GPU-hours, level 1) is preempted after one hour
    assert set(cache.admitted) == {"newcomer"}
    # The newcomer reaches level 1 itself after an hour; the veteran, waiting 4 x its hour, is promoted
    # to level 0 and preempts it.
    _settle(cache, now=5 * HOUR)
    assert set(cache.admitted) == {"veteran"}


def test_queue_kind_sets_the_strategy_and_its_levels() -> None:
    queue = Queue.model_validate(
        {
            "metadata": {"name": "las"},
            "spec": {
                "queueingStrategy": "LeastAttainedService",
                "leastAttainedService": {"thresholdsGpuHours": [2, 20], "promoteFactor": 3},
            },
        }
    )
    settings = queue_settings(queue.name, queue.spec)
    assert settings.least_attained
    assert settings.las == LasSettings(thresholds=(2 * HOUR, 20 * HOUR), promote_factor=3.0)


def test_thresholds_that_do_not_increase_are_refused_naming_the_field() -> None:
    with pytest.raises(Exception, match="thresholdsGpuHours"):
        Queue.model_validate(
            {"metadata": {"name": "las"}, "spec": {"leastAttainedService": {"thresholdsGpuHours": [5, 1]}}}
        )
