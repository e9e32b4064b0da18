"""One workload whose numbers trip the placement code cannot stop the cycle for the others."""

from __future__ import annotations

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import Scheduler, apply_decisions
from gpufleet.scheduler.explain import SCHEDULING_ERROR
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

F = "H100-80GB"


def test_a_request_that_breaks_placement_is_left_out_with_its_error() -> None:
    fleet = FleetState()
    for i in range(2):
        fleet.add_node(NodeSpec(f"n{i}", F, 8, 64_000, 512_000, sharing=SharingMode.EXCLUSIVE))
    tree = QuotaTree([QuotaNode("q", unlimited=True)])
    cache = ClusterCache(
        fleet=fleet, tree=tree, settings={"q": QueueSettings("q")}, history=UsageHistory(3600)
    )
    # What a quantity of 1e5000 cores was before quantities were bounded: placement cannot handle it.
    broken = Workload("broken", (PodSet("main", 1, PodRequest(gpus=1, cpu_milli=10**5000)),), queue="q")
    good = [Workload(f"good{i}", (PodSet("main", 2, PodRequest(gpus=4)),), queue="q") for i in range(2)]
    cache.submit(broken)
    for workload in good:
        cache.submit(workload)
    result = Scheduler().cycle(cache, now=1000.0)
    assert {a.workload for a in result.admitted} == {"good0", "good1"}
    reason = result.pending["broken"].reason
    assert reason.type == SCHEDULING_ERROR and "cannot be scheduled" in reason.message
    # The core logs nothing: the error goes back to the world, which logs and counts it.
    assert list(result.errors) == ["broken"] and isinstance(result.errors["broken"], Exception)
    apply_decisions(cache, result, now=1000.0)
    cache.fleet.check_invariants()  # nothing the broken attempt touched is left behind
    again = Scheduler().cycle(cache, now=1001.0)
    assert not again.admitted and again.pending["broken"].reason.type == SCHEDULING_ERROR
