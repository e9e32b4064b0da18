"""Capacity to come (decision 23): pods on their way out still hold their capacity, but it is coming.

A workload that fits once they are gone waits for them (WaitingForPreemption) and chooses no new
victim; where evictions take time, the victims a cycle chooses count so for the rest of that cycle.
The drain case found on a real API server: team-b borrows every GPU with two 8-GPU gangs, three 1-GPU
replicas of team-a (within its nominal quota) arrive; one gang frees room for all three.
"""

from __future__ import annotations

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import Allocation, FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.flavors import Assignment, usage_of
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
NOW = 10_000.0
REPLICAS = ("replica-0", "replica-1", "replica-2")


def _drain_case(*, graceful: bool, nodes: int = 2) -> ClusterCache:
    """team-b's gangs `b-old` on n1 and `b-new` on n2 (4+4 GPUs each); team-a's replicas pending."""
    fleet = FleetState()
    for i in range(1, nodes + 1):
        fleet.add_node(NodeSpec(f"n{i}", H100, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree(
        [
            QuotaNode("root", None, {}),
            QuotaNode("team-a", "root", {H100: FlavorLimits(16_000)}),
            QuotaNode("team-b", "root", {H100: FlavorLimits(0)}),
        ]
    )
    settings = {name: QueueSettings(name) for name in tree.nodes}
    cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600))
    cache.graceful_evictions = graceful
    for name, node, started in (("b-old", "n1", NOW - 3600), ("b-new", "n2", NOW - 600)):
        gang = _workload(name, "team-b", gpus=4, pods=2, priority=10_000)
        row = fleet.row_of(node)
        pods = [
            Allocation(gang.pod_name("main", i), row, tuple(range(4 * i, 4 * i + 4)), 1000, 0, 0)
            for i in (0, 1)
        ]
        cache.admit(gang, Assignment(H100, (2,), usage_of(gang, H100, (2,))), pods, now=started)
    for i, name in enumerate(REPLICAS):
        cache.submit(_workload(name, "team-a", gpus=1, priority=100_000, at=NOW - 10 + i))
    return cache


def _workload(name: str, queue: str, *, gpus: int, pods: int = 1, priority: int, at: float = 0.0) -> Workload:
    request = PodRequest(gpus=gpus, gpu_models=(H100,))
    return Workload(name, (PodSet("main", pods, request),), queue=queue, priority=priority, submitted_at=at)


def _being_deleted(cache: ClusterCache, name: str) -> None:
    """The world deletes a workload's pods (a drain, a user): they go on holding their GPUs meanwhile."""
    pods = list(cache.admitted[name].pods.values())
    cache.finish(name, now=NOW)
    for pod in pods:
        cache.hold_leaving(pod)


def _cycle(cache: ClusterCache, scheduler: Scheduler) -> CycleResult:
    result = scheduler.cycle(cache, now=NOW)
    apply_decisions(cache, result, now=NOW)
    return result


def _nodes_of(cache: ClusterCache, name: str) -> list[str]:
    return sorted(cache.fleet.names[a.node] for a in cache.admitted[name].pods.values())


def test_replicas_wait_for_the_one_gang_being_evicted_and_land_where_it_was() -> None:
    cache = _drain_case(graceful=True)
    scheduler = Scheduler()

    first = _cycle(cache, scheduler)
    assert [(p.victim, p.preemptor) for p in first.preempted] == [("b-new", "replica-0")]
    assert first.admitted == []  # nobody is placed on GPUs the victims still hold
    assert {name: first.pending[name].reason.type for name in REPLICAS} == dict.fromkeys(
        REPLICAS, "WaitingForPreemption"
    )
    assert first.nominated == list(REPLICAS)
    leaving = sorted(cache.leaving)
    assert leaving == ["b-new/main/0#leaving", "b-new/main/1#leaving"]

    for _ in range(3):  # the victims take their time: nothing more is evicted meanwhile
        later = _cycle(cache, scheduler)
        assert later.preempted == [] and later.admitted == []
        for name in REPLICAS:
            reason = later.pending[name].reason
            assert reason.type == "WaitingForPreemption"
            assert reason.details["terminating"] == leaving
            assert reason.message.startswith("waiting for the capacity of 2 terminating pods: b-new/main/0")
    assert "b-old" in cache.admitted

    for name in leaving:
        cache.gone(name)
    done = _cycle(cache, scheduler)
    assert sorted(a.workload for a in done.admitted) == list(REPLICAS)
    assert done.preempted == []
    assert all(_nodes_of(cache, name) == ["n2"] for name in REPLICAS)
    assert _nodes_of(cache, "b-old") == ["n1", "n1"]


def test_where_evictions_free_capacity_at_once_the_replicas_start_in_the_same_cycle() -> None:
    cache = _drain_case(graceful=False)
    result = _cycle(cache, Scheduler())
    assert [p.victim for p in result.preempted] == ["b-new"]
    assert sorted(a.workload for a in result.admitted) == ["replica-1", "replica-2"]
    assert result.pending["replica-0"].reason.type == "WaitingForPreemption"
    assert cache.leaving == set()


def test_pods_the_world_reports_leaving_are_waited_for_without_new_victims() -> None:
    cache = _drain_case(graceful=True)
    _being_deleted(cache, "b-new")
    scheduler = Scheduler()
    result = _cycle(cache, scheduler)
    assert result.preempted == [] and result.admitted == []
    assert all(result.pending[name].reason.type == "WaitingForPreemption" for name in REPLICAS)
    for name in sorted(cache.leaving):
        cache.gone(name)
    result = _cycle(cache, scheduler)
    assert sorted(a.workload for a in result.admitted) == list(REPLICAS)
    assert "b-old" in cache.admitted


def test_what_does_not_fit_in_the_capacity_to_come_still_preempts() -> None:
    # A 16-GPU gang of team-a cannot wait for one node's worth of terminating pods: it takes both gangs,
    # counting the leaving pods' GPUs as freed (b-new is not evicted twice).
    cache = _drain_case(graceful=True)
    for name in REPLICAS:
        del cache.pending[name]
    _being_deleted(cache, "b-new")
    cache.submit(_workload("big", "team-a", gpus=8, pods=2, priority=100_000, at=NOW))
    result = _cycle(cache, Scheduler())
    assert [p.victim for p in result.preempted] == ["b-old"]
    assert result.pending["big"].reason.type == "WaitingForPreemption"


def test_capacity_to_come_on_a_node_closed_to_the_workload_is_not_waited_for() -> None:
    # The leaving pods are on a cordoned node (the drained one): nobody can wait for it.
    cache = _drain_case(graceful=True, nodes=3)
    cache.fleet.set_schedulable("n3", False)
    row = cache.fleet.row_of("n3")
    for i in range(3):
        cache.hold_leaving(Allocation(f"old-replica-{i}", row, (i,), 1000, 0, 0))
    result = _cycle(cache, Scheduler())
    assert [(p.victim, p.preemptor) for p in result.preempted] == [("b-new", "replica-0")]
    assert all(result.pending[name].reason.type == "WaitingForPreemption" for name in REPLICAS)
    assert all("n3" not in str(result.pending[name].reason.details) for name in REPLICAS)
