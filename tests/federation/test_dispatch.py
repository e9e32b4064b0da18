"""The dispatcher: a gang goes whole to one cluster it fits now, under a quota counted over the fleet,
cheapest and preferred first, never to a cluster its queue forbids or that takes no new work."""

from __future__ import annotations

from gpufleet.api.labels import LabelSelector
from gpufleet.federation.dispatch import ClusterChoice, Dispatched, Dispatcher, NotDispatched
from gpufleet.federation.summary import ClusterSummary, summarize
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

H100 = "H100-80GB"
LEVELS = ("block", "rack")


def worker(
    name: str,
    *,
    racks: int = 2,
    hosts_per_rack: int = 2,
    price: float = 3.0,
    labels: dict[str, str] | None = None,
    accepting: bool = True,
) -> ClusterSummary:
    state = FleetState(LEVELS)
    for rack in range(racks):
        for host in range(hosts_per_rack):
            state.add_node(
                NodeSpec(
                    f"r{rack}-h{host}",
                    gpu_model=H100,
                    gpus=8,
                    labels={"block": "b1", "rack": f"r{rack}"},
                    sharing=SharingMode.EXCLUSIVE,
                )
            )
    return ClusterSummary(name, summarize(state), labels or {}, {H100: price}, accepting, LEVELS)


def quota(nominal_gpus: int | None = None) -> QuotaUsage:
    if nominal_gpus is None:
        team = QuotaNode("team", unlimited=True)
        return QuotaUsage(QuotaTree([team]))
    nodes = [QuotaNode("org"), QuotaNode("team", "org", {H100: FlavorLimits(nominal_gpus * 1000)})]
    return QuotaUsage(QuotaTree(nodes))


def gang(name: str, pods: int, gpus: int = 8, *, required: str | None = None) -> Workload:
    return Workload(
        name,
        (PodSet("main", pods, PodRequest(gpus=gpus)),),
        queue="team",
        topology=TopologyRequest(required=required),
    )


def dispatcher(*clusters: ClusterSummary, usage: QuotaUsage | None = None) -> Dispatcher:
    return Dispatcher(clusters, usage or quota())


def cluster_of(decision: object) -> str:
    assert isinstance(decision, Dispatched), decision
    return decision.cluster


def test_a_gang_needing_a_whole_rack_goes_where_a_rack_holds_it_even_at_a_higher_price() -> None:
    small = worker("small", racks=4, hosts_per_rack=2, price=2.0)  # racks of 16 GPUs, 64 free
    big = worker("big", racks=1, hosts_per_rack=4, price=4.0)  # one rack of 32 GPUs
    d = dispatcher(small, big)
    assert cluster_of(d.dispatch(gang("rack-gang", 4, required="rack"))) == "big"
    assert cluster_of(d.dispatch(gang("half", 2, required="rack"))) == "small", "the cheaper one fits it"


def test_what_was_dispatched_is_taken_out_until_the_next_heartbeat() -> None:
    a = worker("a", racks=1, hosts_per_rack=2, price=1.0)
    b = worker("b", racks=1, hosts_per_rack=2, price=2.0)
    d = dispatcher(a, b)
    assert cluster_of(d.dispatch(gang("first", 2, required="rack"))) == "a"
    assert cluster_of(d.dispatch(gang("second", 2, required="rack"))) == "b", "a's only rack is taken"
    third = d.dispatch(gang("third", 1))
    assert isinstance(third, NotDispatched) and third.reason == "NoCluster"
    d.update(worker("a", racks=1, hosts_per_rack=2, price=1.0))  # a's work finished: a fresh report
    assert cluster_of(d.dispatch(gang("third", 1))) == "a"


def test_a_gang_is_never_split_across_clusters() -> None:
    d = dispatcher(worker("a", racks=2), worker("b", racks=2))  # 32 GPUs each, 64 in all
    decision = d.dispatch(gang("huge", 6))
    assert isinstance(decision, NotDispatched) and decision.reason == "NoCluster"
    assert "48 free GPUs needed, 32 free" in str(decision.details["clusters"])


def test_a_preferred_cluster_comes_before_a_cheaper_one_and_restrictions_hold() -> None:
    cheap = worker("cheap", price=1.0, labels={"region": "us"})
    dear = worker("dear", price=5.0, labels={"region": "eu"})
    d = dispatcher(cheap, dear)
    assert cluster_of(d.dispatch(gang("w1", 1))) == "cheap"
    assert cluster_of(d.dispatch(gang("w2", 1), ClusterChoice(preferred=frozenset({"dear"})))) == "dear"
    eu_only = ClusterChoice(selector=LabelSelector.parse("region=eu"))
    assert cluster_of(d.dispatch(gang("w3", 1), eu_only)) == "dear"
    named = ClusterChoice(allowed=frozenset({"nowhere"}), selector=LabelSelector())
    refused = d.dispatch(gang("w4", 1), named)
    assert isinstance(refused, NotDispatched) and refused.reason == "NoCluster"


def test_a_draining_or_lost_cluster_gets_no_new_work() -> None:
    d = dispatcher(worker("draining", price=1.0, accepting=False), worker("up", price=9.0))
    assert cluster_of(d.dispatch(gang("w", 1))) == "up"


def test_the_quota_counts_usage_over_the_whole_fleet() -> None:
    usage = quota(nominal_gpus=24)
    d = dispatcher(worker("a", racks=1, price=1.0), worker("b", racks=1, price=2.0), usage=usage)
    first = d.dispatch(gang("first", 2))
    assert cluster_of(first) == "a"
    assert cluster_of(d.dispatch(gang("second", 1))) == "b", "a is full, the queue has 8 GPUs left"
    refused = d.dispatch(gang("third", 1))
    assert isinstance(refused, NotDispatched) and refused.reason == "QuotaExceeded"
    assert usage.usage("team", H100) == 24_000
    assert isinstance(first, Dispatched)
    d.release(first)
    assert usage.usage("team", H100) == 8_000
    assert cluster_of(d.dispatch(gang("third", 1))) == "b", "quota back; a's summary still shows it full"


def test_an_unknown_queue_is_named() -> None:
    decision = dispatcher(worker("a")).dispatch(
        Workload("w", (PodSet("main", 1, PodRequest(gpus=1)),), queue="ghost")
    )
    assert isinstance(decision, NotDispatched) and decision.reason == "QueueNotFound"
    assert "ghost" in decision.message


def test_shares_and_mig_count_against_their_own_capacity() -> None:
    state = FleetState()
    state.add_node(NodeSpec("ts", gpu_model=H100, gpus=2, sharing=SharingMode.TIME_SLICING, replicas=4))
    d = Dispatcher([ClusterSummary("a", summarize(state))], quota())
    shares = Workload("s", (PodSet("main", 4, PodRequest(gpu_milli=500)),), queue="team")
    assert cluster_of(d.dispatch(shares)) == "a"
    more = d.dispatch(Workload("t", (PodSet("main", 1, PodRequest(gpu_milli=500)),), queue="team"))
    assert isinstance(more, NotDispatched)
    whole = d.dispatch(gang("w", 1, gpus=1))
    assert isinstance(whole, NotDispatched), "time-sliced GPUs hold no whole-GPU pod"


def test_among_equally_priced_clusters_work_fills_the_fullest_that_fits_it() -> None:
    """Best fit across clusters: small work goes where room is already broken up, so an emptier cluster
    keeps whole hosts for a gang that must fit inside one cluster."""
    d = dispatcher(worker("a", racks=1), worker("b", racks=1))  # 16 GPUs each, same price
    assert cluster_of(d.dispatch(gang("x", 1, gpus=4), ClusterChoice(preferred=frozenset({"b"})))) == "b"
    assert cluster_of(d.dispatch(gang("small", 1, gpus=2))) == "b", "b has 12 free, a 16"
    assert cluster_of(d.dispatch(gang("gang", 2))) == "a", "a kept both hosts whole"


def test_a_small_pod_fills_a_partial_host_in_any_cluster_before_it_breaks_a_whole_one() -> None:
    """Best fit over the fleet's hosts, as one cluster of them all would place it: the fullest cluster
    has only a whole host left for the pod, the other a partial host it fits, so the pod goes there and
    both clusters keep a whole host for a one-host job."""
    d = dispatcher(worker("a", racks=1), worker("b", racks=1))  # 2 hosts of 8 each
    only = {name: ClusterChoice(allowed=frozenset({name})) for name in ("a", "b")}
    assert cluster_of(d.dispatch(gang("four", 1, gpus=4), only["a"])) == "a"  # a: hosts 4 and 8 free
    assert cluster_of(d.dispatch(gang("seven", 1, gpus=7), only["b"])) == "b"  # b: hosts 1 and 8 free
    assert cluster_of(d.dispatch(gang("three", 1, gpus=3))) == "a", "a's host of 4, not b's whole host"
    assert {cluster_of(d.dispatch(gang(f"host-{i}", 1))) for i in range(2)} == {"a", "b"}
