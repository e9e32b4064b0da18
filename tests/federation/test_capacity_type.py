"""A queue's capacity-typed flavor (`H100-80GB/spot`) is dispatched to hosts of that capacity type, not
to any host of the model: the dispatcher pins the gang as the scheduling core does (the node label
`gpufleet.io/capacity-type`), charges that flavor, and the decision names it, so the manager records it
and grants it to the worker's queue."""

from __future__ import annotations

from gpufleet.api.labels import CAPACITY_TYPE_LABEL, SPOT_TAINT
from gpufleet.federation.dispatch import Dispatched, Dispatcher, NotDispatched
from gpufleet.federation.summary import ClusterSummary, summarize
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest, Taint
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
SPOT = f"{H100}/spot"
ON_DEMAND = f"{H100}/on-demand"


def hosts(name: str, count: int, capacity: str) -> FleetState:
    state = FleetState()
    taints = (Taint(SPOT_TAINT, "true", "NoSchedule"),) if capacity == "spot" else ()
    for i in range(count):
        labels = {CAPACITY_TYPE_LABEL: capacity}
        state.add_node(NodeSpec(f"{name}-{i}", gpu_model=H100, gpus=8, labels=labels, taints=taints))
    return state


def cluster(name: str, state: FleetState, price: float) -> ClusterSummary:
    return ClusterSummary(name, summarize(state), {}, {H100: price}, True, ())


def dispatcher(quotas: dict[str, int], *clusters: ClusterSummary) -> Dispatcher:
    limits = {flavor: FlavorLimits(gpus * 1000) for flavor, gpus in quotas.items()}
    return Dispatcher(clusters, QuotaUsage(QuotaTree([QuotaNode("team", quotas=limits)])))


def job(name: str, gpus: int = 8) -> Workload:
    return Workload(name, (PodSet("main", 1, PodRequest(gpus=gpus)),), queue="team")


def dispatched(decision: object) -> Dispatched:
    assert isinstance(decision, Dispatched), decision
    return decision


def test_a_spot_flavor_goes_to_spot_hosts_though_an_on_demand_cluster_is_cheaper() -> None:
    on_demand = cluster("od", hosts("od", 4, "on-demand"), price=1.0)
    spot = cluster("spot", hosts("sp", 1, "spot"), price=2.0)
    d = dispatcher({SPOT: 64}, on_demand, spot)
    first = dispatched(d.dispatch(job("first")))
    assert (first.cluster, first.model, first.flavor, dict(first.usage)) == ("spot", H100, SPOT, {SPOT: 8000})
    full = d.dispatch(job("second"))
    assert isinstance(full, NotDispatched) and full.reason == "NoCluster", "od has room, but no spot host"
    assert full.details["clusters"] == {
        f"od/{SPOT}": f"no host of {H100} matches nodeSelector {CAPACITY_TYPE_LABEL}=spot",
        f"spot/{SPOT}": "8 free GPUs needed, 0 free",
    }


def test_the_queues_flavors_are_tried_in_order_each_on_its_own_hosts() -> None:
    mixed = hosts("m", 1, "spot")
    mixed.add_node(NodeSpec("m-od", gpu_model=H100, gpus=8, labels={CAPACITY_TYPE_LABEL: "on-demand"}))
    d = dispatcher({SPOT: 64, ON_DEMAND: 64}, cluster("w", mixed, price=1.0))
    assert dispatched(d.dispatch(job("a"))).flavor == SPOT
    assert dispatched(d.dispatch(job("b"))).flavor == ON_DEMAND, "the spot host is taken: the next flavor"
    assert isinstance(d.dispatch(job("c")), NotDispatched)


def test_the_spot_flavors_quota_is_what_is_charged() -> None:
    d = dispatcher({SPOT: 8, ON_DEMAND: 0}, cluster("sp", hosts("sp", 4, "spot"), price=1.0))
    assert dict(dispatched(d.dispatch(job("a"))).usage) == {SPOT: 8000}
    over = d.dispatch(job("b"))
    assert isinstance(over, NotDispatched) and over.reason == "QuotaExceeded", "spot's 8 GPUs are in use"


def test_a_plain_model_flavor_still_takes_any_host_of_the_model() -> None:
    d = dispatcher({H100: 64, SPOT: 0}, cluster("sp", hosts("sp", 1, "spot"), price=1.0))
    decision = dispatched(d.dispatch(job("a")))
    assert (decision.cluster, decision.flavor) == ("sp", H100), "a spot flavor in the queue: tolerated"
