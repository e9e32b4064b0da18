"""A workload is not dispatched to a cluster where one of its GPU pods fits no host ever: more CPU or
memory than the largest host of the model has, or a taint every such host carries that it does not
tolerate. A report from an older worker, without these figures, is taken as fitting."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.api import Cluster, parse_object
from gpufleet.api.labels import SPOT_TAINT
from gpufleet.federation.convert import capacity_status, summary_of
from gpufleet.federation.dispatch import Dispatched, Dispatcher, NotDispatched
from gpufleet.federation.summary import ClusterSummary, summarize
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest, Taint, Toleration
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
GIB = 1024
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RESERVED = Taint("dedicated", "team-b", "NoSchedule")


def fleet(
    hosts: int, *, cpu: int = 96_000, memory_gib: int = 1024, taints: tuple[Taint, ...] = ()
) -> FleetState:
    state = FleetState(())
    for i in range(hosts):
        spec = NodeSpec(
            f"h{i}", gpu_model=H100, gpus=8, cpu_milli=cpu, memory_mib=memory_gib * GIB, taints=taints
        )
        state.add_node(spec)
    return state


def cluster(name: str, state: FleetState, price: float) -> ClusterSummary:
    return ClusterSummary(name, summarize(state), {}, {H100: price}, True, ())


def dispatcher(*clusters: ClusterSummary) -> Dispatcher:
    return Dispatcher(clusters, QuotaUsage(QuotaTree([QuotaNode("team", unlimited=True)])))


def job(
    name: str, *, cpu: int = 8_000, memory_gib: int = 64, tolerations: tuple[Toleration, ...] = ()
) -> Workload:
    request = PodRequest(gpus=8, cpu_milli=cpu, memory_mib=memory_gib * GIB, tolerations=tolerations)
    return Workload(name, (PodSet("main", 2, request),), queue="team")


def cluster_of(decision: object) -> str:
    assert isinstance(decision, Dispatched), decision
    return decision.cluster


def test_the_summary_has_the_largest_host_and_the_taints_every_host_carries() -> None:
    state = fleet(2, cpu=64_000, memory_gib=512, taints=(RESERVED, Taint("soft", "", "PreferNoSchedule")))
    state.add_node(NodeSpec("big", gpu_model=H100, gpus=8, cpu_milli=192_000, memory_mib=2048 * GIB))
    untainted = summarize(state)[H100]
    assert (untainted.host_cpu_milli, untainted.host_memory_mib) == (192_000, 2048 * GIB)
    assert untainted.taints == (), "a host without the taint takes the pod"
    state.set_taints("big", (Taint("other", "x", "NoExecute"), RESERVED))
    assert summarize(state)[H100].taints == (RESERVED,), "only NoSchedule/NoExecute taints all hosts share"


def test_a_memory_heavy_job_skips_the_cluster_of_small_hosts_for_the_one_that_holds_it() -> None:
    small = cluster("small", fleet(4, memory_gib=256), price=1.0)
    big = cluster("big", fleet(4, memory_gib=2048), price=4.0)
    d = dispatcher(small, big)
    assert cluster_of(d.dispatch(job("light", memory_gib=128))) == "small", "the cheaper one holds it"
    assert cluster_of(d.dispatch(job("heavy", memory_gib=1024))) == "big"
    alone = dispatcher(cluster("small", fleet(4, memory_gib=256), price=1.0))
    decision = alone.dispatch(job("heavy", memory_gib=1024))
    assert isinstance(decision, NotDispatched) and decision.reason == "NoCluster"
    assert "1048576 MiB of memory, the largest host has 262144" in decision.message
    assert decision.details["clusters"] == {
        "small/H100-80GB": "a pod asks 1048576 MiB of memory, the largest host has 262144"
    }


def test_a_job_asking_more_cpu_than_any_host_is_not_dispatched() -> None:
    decision = dispatcher(cluster("w", fleet(4, cpu=96_000), price=1.0)).dispatch(job("j", cpu=128_000))
    assert isinstance(decision, NotDispatched) and decision.reason == "NoCluster"
    assert "a pod asks 128000 milli-CPU, the largest host has 96000" in decision.message


def test_a_job_that_does_not_tolerate_a_cluster_wide_taint_skips_that_cluster() -> None:
    reserved = cluster("reserved", fleet(4, taints=(RESERVED,)), price=1.0)
    shared = cluster("shared", fleet(4), price=4.0)
    d = dispatcher(reserved, shared)
    assert cluster_of(d.dispatch(job("outsider"))) == "shared"
    tolerant = (Toleration("dedicated", "Equal", "team-b", "NoSchedule"),)
    assert cluster_of(d.dispatch(job("team-b", tolerations=tolerant))) == "reserved"
    anything = (Toleration(operator="Exists"),)
    assert cluster_of(d.dispatch(job("tolerates-all", tolerations=anything))) == "reserved"
    wrong_value = (Toleration("dedicated", "Equal", "team-c"),)
    decision = dispatcher(reserved).dispatch(job("team-c", tolerations=wrong_value))
    assert isinstance(decision, NotDispatched) and decision.reason == "NoCluster"
    assert "does not tolerate dedicated=team-b:NoSchedule, which every host has" in decision.message


def test_the_figures_round_trip_through_the_cluster_status() -> None:
    capacity = capacity_status(summarize(fleet(2, cpu=64_000, memory_gib=512, taints=(RESERVED,))))
    h100 = Cluster.model_validate(reported(capacity_status=capacity)).status.capacity[H100]
    assert (h100.host_cpu_milli, h100.host_memory_mib) == (64_000, 512 * GIB)
    summary = summary_of(Cluster.model_validate(reported(capacity_status=capacity)), now=NOW).models[H100]
    assert (summary.host_cpu_milli, summary.host_memory_mib, summary.taints) == (
        64_000,
        512 * GIB,
        (RESERVED,),
    )


def test_an_older_workers_report_without_the_figures_still_dispatches() -> None:
    capacity = {
        H100: {
            "gpus": 32,
            "freeGpus": 32,
            "freeDomains": {"host": {"8": 4}},
            "largestFreeDomain": {"host": 8},
        }
    }
    old = summary_of(Cluster.model_validate(reported(capacity=capacity)), now=NOW)
    assert old.models[H100].host_cpu_milli is None and old.models[H100].taints == ()
    decision = dispatcher(old).dispatch(job("heavy", cpu=500_000, memory_gib=8192))
    assert cluster_of(decision) == "w1"


def reported(*, capacity: object = None, capacity_status: object = None) -> dict[str, object]:
    """A Cluster as read back from a store: `capacity` as an older worker wrote it, or a new report."""
    status: dict[str, object] = {"heartbeatTime": NOW.isoformat()}
    if capacity is not None:
        status["capacity"] = capacity
    cluster = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "w1"},
            "spec": {"connection": {"kubeconfigSecretRef": {"name": "w1", "key": "kubeconfig"}}},
            "status": status,
        }
    )
    assert isinstance(cluster, Cluster)
    if capacity_status is not None:
        cluster.status.capacity = capacity_status  # type: ignore[assignment]
    return cluster.to_dict()


def test_a_queue_with_a_spot_flavor_tolerates_a_spot_only_cluster_as_the_workers_operator_will() -> None:
    spot_only = cluster("spot", fleet(4, taints=(Taint(SPOT_TAINT, "true", "NoSchedule"),)), price=1.0)
    limits = {f"{H100}/spot": FlavorLimits(64_000), H100: FlavorLimits(64_000)}
    with_spot = Dispatcher([spot_only], QuotaUsage(QuotaTree([QuotaNode("team", quotas=limits)])))
    assert cluster_of(with_spot.dispatch(job("spot-ok"))) == "spot"
    on_demand = QuotaTree([QuotaNode("team", quotas={H100: FlavorLimits(64_000)})])
    decision = Dispatcher([spot_only], QuotaUsage(on_demand)).dispatch(job("on-demand"))
    assert isinstance(decision, NotDispatched) and decision.reason == "NoCluster"
    assert f"does not tolerate {SPOT_TAINT}=true:NoSchedule" in decision.message
