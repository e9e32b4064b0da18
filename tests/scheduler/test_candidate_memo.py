"""Preemption candidates kept per queue across cycles: reused only while the queue is unchanged."""

from __future__ import annotations

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache, Snapshot
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.preemption import candidates
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"


def _cache() -> ClusterCache:
    fleet = FleetState()
    for i in range(2):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree(
        [
            QuotaNode("root"),
            QuotaNode("a", "root", {H100: FlavorLimits(8000)}),
            QuotaNode("b", "root", {H100: FlavorLimits(8000)}),
        ]
    )
    settings = {name: QueueSettings(name) for name in tree.nodes}
    return ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))


def _workload(name: str, queue: str, gpus: int, priority: int = 0) -> Workload:
    return Workload(name, (PodSet("main", 1, PodRequest(gpus=gpus)),), queue=queue, priority=priority)


def _admit_all(cache: ClusterCache, now: float) -> None:
    result = Scheduler().cycle(cache, now=now)
    apply_decisions(cache, result, now=now)


def _lost(cache: ClusterCache, preemptor: Workload, now: float) -> dict[str, float]:
    snapshot = Snapshot(cache)
    try:
        assignment = Assignment(H100, (1,), {H100: 8000})
        return {c.name: c.lost_gpu_seconds for c in candidates(snapshot, preemptor, assignment, now=now)}
    finally:
        snapshot.restore()


def test_lost_work_follows_time_checkpoints_and_new_members_across_cycles() -> None:
    cache = _cache()
    # Queue b borrows: 16 GPUs against a nominal of 8, so queue a may reclaim from it.
    cache.submit(_workload("b1", "b", 8))
    cache.submit(_workload("b2", "b", 8))
    _admit_all(cache, now=0.0)
    assert set(cache.admitted) == {"b1", "b2"}
    preemptor = _workload("urgent", "a", 8, priority=10)
    assert _lost(cache, preemptor, now=100.0) == {"b1": 800.0, "b2": 800.0}
    # The same queue at a later time: the kept candidates are re-timed.
    assert _lost(cache, preemptor, now=200.0) == {"b1": 1600.0, "b2": 1600.0}
    # A checkpoint replaces the workload without changing usage: seen at the next cycle.
    cache.checkpoint("b1", now=190.0)
    assert _lost(cache, preemptor, now=200.0) == {"b1": 80.0, "b2": 1600.0}
    # A member leaves: no longer a candidate (b no longer borrows, so none is).
    cache.finish("b2", now=200.0)
    assert _lost(cache, preemptor, now=200.0) == {}
