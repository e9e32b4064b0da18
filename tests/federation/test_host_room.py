"""A host whose GPUs are free while its CPU or memory is taken is no room for a pod that asks for them:
a worker reports, per label group and free-GPU count, the most free CPU and memory of one such host, and
the dispatcher places a pod only where its GPUs, CPU and memory are free together. A report without
those figures (an older worker) is checked on GPUs alone, as before."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.api import Cluster, parse_object
from gpufleet.federation.convert import capacity_status, summary_of
from gpufleet.federation.dispatch import Dispatched, Dispatcher, NotDispatched
from gpufleet.federation.summary import ClusterSummary, summarize
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.quota import QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

H100 = "H100-80GB"
GIB = 1024
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def hosts(count: int, *, cpu_taken: int = 0, memory_taken_gib: int = 0) -> FleetState:
    """`count` hosts of 8 GPUs, 96 CPUs and 1 TiB; on each, a CPU-only pod holds what is `taken`."""
    state = FleetState()
    for i in range(count):
        state.add_node(NodeSpec(f"h{i}", gpu_model=H100, gpus=8, cpu_milli=96_000, memory_mib=1024 * GIB))
        if cpu_taken or memory_taken_gib:
            state.allocate(f"cpu-{i}", i, PodRequest(cpu_milli=cpu_taken, memory_mib=memory_taken_gib * GIB))
    return state


def cluster(name: str, state: FleetState, price: float) -> ClusterSummary:
    return ClusterSummary(name, summarize(state), {}, {H100: price}, True, ())


def dispatcher(*clusters: ClusterSummary) -> Dispatcher:
    return Dispatcher(clusters, QuotaUsage(QuotaTree([QuotaNode("team", unlimited=True)])))


def job(name: str, *, gpus: int = 8, pods: int = 1, cpu: int = 0, memory_gib: int = 0) -> Workload:
    request = PodRequest(gpus=gpus, cpu_milli=cpu, memory_mib=memory_gib * GIB)
    return Workload(name, (PodSet("main", pods, request),), queue="team")


def cluster_of(decision: object) -> str:
    assert isinstance(decision, Dispatched), decision
    return decision.cluster


def test_the_summary_has_the_most_free_cpu_and_memory_per_free_gpu_count() -> None:
    state = hosts(2)
    state.allocate("cpu-heavy", 0, PodRequest(cpu_milli=90_000, memory_mib=100 * GIB))
    state.allocate("half", 1, PodRequest(gpus=4, cpu_milli=16_000, memory_mib=512 * GIB), (0, 1, 2, 3))
    labels = summarize(state)[H100].host_labels
    assert labels is not None
    (group,) = labels.groups
    assert group.free == {8: 1, 4: 1}
    assert group.cpu == {8: 6_000, 4: 80_000}
    assert group.memory == {8: 924 * GIB, 4: 512 * GIB}


def test_a_job_goes_where_its_cpu_is_free_not_only_its_gpus() -> None:
    busy = cluster("busy", hosts(4, cpu_taken=90_000), price=1.0)
    idle = cluster("idle", hosts(4), price=3.0)
    d = dispatcher(busy, idle)
    assert cluster_of(d.dispatch(job("gpu-only"))) == "busy", "asks no CPU: the cheaper one's GPUs are free"
    assert cluster_of(d.dispatch(job("small-cpu", cpu=4_000))) == "busy"
    assert cluster_of(d.dispatch(job("cpu-heavy", cpu=32_000))) == "idle", "busy's hosts have 6 CPUs free"
    alone = dispatcher(cluster("busy", hosts(4, cpu_taken=90_000), price=1.0))
    decision = alone.dispatch(job("cpu-heavy", cpu=32_000))
    assert isinstance(decision, NotDispatched) and decision.reason == "NoCluster"
    assert decision.details["clusters"] == {
        "busy/H100-80GB": "a pod of 8 GPUs needs a host with 8 free (and 32000 milli-CPU, 0 MiB), at most 0"
    }


def test_a_job_goes_where_its_memory_is_free() -> None:
    full = cluster("full", hosts(2, memory_taken_gib=900), price=1.0)
    free = cluster("free", hosts(2), price=3.0)
    assert cluster_of(dispatcher(full, free).dispatch(job("mem", memory_gib=256))) == "free"


def test_what_a_pod_took_is_not_offered_again_before_the_next_report() -> None:
    d = dispatcher(cluster("w", hosts(1), price=1.0))
    assert cluster_of(d.dispatch(job("first", gpus=4, cpu=60_000))) == "w"
    decision = d.dispatch(job("second", gpus=4, cpu=60_000))
    assert isinstance(decision, NotDispatched), "4 GPUs are free there, but only 36 CPUs"
    assert cluster_of(d.dispatch(job("third", gpus=4, cpu=36_000))) == "w"


def test_a_gang_on_one_host_adds_up_its_pods_cpu() -> None:
    d = dispatcher(cluster("w", hosts(2, cpu_taken=40_000), price=1.0))
    pair = job("pair", gpus=4, pods=2, cpu=30_000)
    one_host = Workload(pair.name, pair.pod_sets, queue="team", topology=TopologyRequest(required="host"))
    decision = d.dispatch(one_host)
    assert isinstance(decision, NotDispatched), "60 CPUs on one host, 56 free on each"
    assert "8 GPUs needed in one host (and 60000 milli-CPU, 0 MiB), at most 0 free in one" in decision.message
    assert cluster_of(d.dispatch(pair)) == "w", "one pod a host: 30 of 56 CPUs each"


def test_the_figures_round_trip_and_a_report_without_them_checks_gpus_only() -> None:
    capacity = capacity_status(summarize(hosts(2, cpu_taken=90_000)))
    group = capacity[H100].host_labels.groups[0]  # type: ignore[union-attr]
    assert (group.most_free_cpu_milli, group.most_free_memory_mib) == ({"8": 6_000}, {"8": 1024 * GIB})
    back = summary_of(reported(capacity), now=NOW)
    assert isinstance(dispatcher(back).dispatch(job("cpu-heavy", cpu=32_000)), NotDispatched)
    data = {model: c.to_dict() for model, c in capacity.items()}
    for g in data[H100]["hostLabels"]["groups"]:
        del g["mostFreeCpuMilli"], g["mostFreeMemoryMib"]
    older = summary_of(reported(data), now=NOW)
    assert cluster_of(dispatcher(older).dispatch(job("cpu-heavy", cpu=32_000))) == "w1"


def reported(capacity: dict[str, object]) -> Cluster:
    """A Cluster as read back from a store, with `capacity` (models, or their dicts) in its status."""
    cluster = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "w1"},
            "spec": {"connection": {"kubeconfigSecretRef": {"name": "w1", "key": "kubeconfig"}}},
            "status": {"heartbeatTime": NOW.isoformat()},
        }
    )
    assert isinstance(cluster, Cluster)
    data = cluster.to_dict()
    data["status"]["capacity"] = {
        model: c if isinstance(c, dict) else c.to_dict()  # type: ignore[attr-defined]
        for model, c in capacity.items()
    }
    return Cluster.model_validate(data)
