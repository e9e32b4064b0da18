"""A workload whose node selector or required node affinity no host of a cluster satisfies is not sent
there: the worker reports its hosts grouped by label (a few groups, however many hosts), the dispatcher
matches them with the scheduling core's own rules, and NoCluster says which rule no host matches. A
report without the groups (an older worker) still dispatches."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.api import Cluster, TrainingJob, parse_object
from gpufleet.api.dra_devices import NodeSelector
from gpufleet.api.errors import ValidationError
from gpufleet.federation.convert import capacity_status, summary_of
from gpufleet.federation.dispatch import Dispatched, Dispatcher, NotDispatched
from gpufleet.federation.hostlabels import MAX_GROUPS, HostRule
from gpufleet.federation.managed import workload_of
from gpufleet.federation.summary import ClusterSummary, summarize
from gpufleet.federation.templates import template_rules
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest, node_selector_matches
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import static_mask
from gpufleet.scheduler.quota import QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

H100 = "H100-80GB"
HOSTNAME = "kubernetes.io/hostname"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def fleet(name: str, hosts: int, labels: dict[str, str], *, levels: tuple[str, ...] = ()) -> FleetState:
    state = FleetState(levels)
    for i in range(hosts):
        host = f"{name}-h{i}"
        state.add_node(
            NodeSpec(host, gpu_model=H100, gpus=8, cpu_milli=96_000, labels={**labels, HOSTNAME: host})
        )
    return state


def cluster(name: str, state: FleetState, price: float) -> ClusterSummary:
    return ClusterSummary(name, summarize(state), {}, {H100: price}, True, state.levels)


def dispatcher(*clusters: ClusterSummary) -> Dispatcher:
    return Dispatcher(clusters, QuotaUsage(QuotaTree([QuotaNode("team", unlimited=True)])))


def job(name: str, selector: dict[str, str] | None = None, *, pods: int = 1, gpus: int = 8) -> Workload:
    request = PodRequest(gpus=gpus, node_selector=tuple(sorted((selector or {}).items())))
    return Workload(name, (PodSet("main", pods, request),), queue="team")


def cluster_of(decision: object) -> str:
    assert isinstance(decision, Dispatched), decision
    return decision.cluster


def test_the_summary_groups_hosts_by_label_and_does_not_grow_with_the_hosts() -> None:
    state = fleet("w", 3, {"pool": "a100-spot"}, levels=("rack",))
    state.add_node(NodeSpec("odd", gpu_model=H100, gpus=8, labels={"pool": "other", "rack": "r1"}))
    labels = summarize(state)[H100].host_labels
    assert labels is not None
    assert "rack" in labels.unlisted, "topology levels are counted by the domain histograms"
    assert len(labels.groups) == 4, "few hosts: even the host name is listed (exact)"
    big = fleet("w", 5 * MAX_GROUPS, {"pool": "a100-spot"})
    for i in range(5 * MAX_GROUPS):
        big.add_node(NodeSpec(f"b{i}", gpu_model=H100, gpus=8, labels={"pool": "b", HOSTNAME: f"b{i}"}))
    grouped = summarize(big)[H100].host_labels
    assert grouped is not None and HOSTNAME in grouped.unlisted
    assert [(g.labels, g.hosts, g.free) for g in grouped.groups] == [
        ({"pool": "a100-spot"}, 5 * MAX_GROUPS, {8: 5 * MAX_GROUPS}),
        ({"pool": "b"}, 5 * MAX_GROUPS, {8: 5 * MAX_GROUPS}),
    ]


def test_a_job_with_a_selector_goes_to_the_cluster_whose_hosts_match_and_never_to_the_other() -> None:
    cheap = cluster("cheap", fleet("c", 4, {"pool": "on-demand"}), price=1.0)
    spot_hosts = fleet("s", 2, {"pool": "a100-spot"})
    spot_hosts.add_node(NodeSpec("s-other", gpu_model=H100, gpus=8, labels={"pool": "b"}))
    spot = cluster("spot", spot_hosts, price=3.0)
    d = dispatcher(cheap, spot)
    assert cluster_of(d.dispatch(job("plain"))) == "cheap"
    assert cluster_of(d.dispatch(job("s1", {"pool": "a100-spot"}))) == "spot"
    assert cluster_of(d.dispatch(job("s2", {"pool": "a100-spot"}))) == "spot"
    full = d.dispatch(job("s3", {"pool": "a100-spot"}))
    assert isinstance(full, NotDispatched) and full.reason == "NoCluster", "cheap has room, but no match"
    assert full.details["clusters"] == {
        "cheap/H100-80GB": "no host of H100-80GB matches nodeSelector pool=a100-spot",
        "spot/H100-80GB": "a pod of 8 GPUs needs a host matching nodeSelector pool=a100-spot with 8 free, "
        "at most 0",
    }
    assert cluster_of(d.dispatch(job("plain-2"))) == "cheap", "work without a selector still goes"


def test_the_hosts_a_selector_takes_leave_the_others_free() -> None:
    mixed = FleetState()
    for i in range(2):
        mixed.add_node(NodeSpec(f"a{i}", gpu_model=H100, gpus=8, labels={"pool": "a"}))
        mixed.add_node(NodeSpec(f"b{i}", gpu_model=H100, gpus=8, labels={"pool": "b"}))
    d = dispatcher(cluster("w", mixed, price=1.0))
    assert cluster_of(d.dispatch(job("two-a", {"pool": "a"}, pods=2))) == "w"
    assert isinstance(d.dispatch(job("third-a", {"pool": "a"})), NotDispatched)
    assert cluster_of(d.dispatch(job("two-b", {"pool": "b"}, pods=2))) == "w", "pool b's hosts are free"
    assert isinstance(d.dispatch(job("any")), NotDispatched), "all four hosts are taken"


def test_a_gang_on_one_host_needs_a_matching_host_with_room() -> None:
    mixed = FleetState()
    mixed.add_node(NodeSpec("a", gpu_model=H100, gpus=4, labels={"pool": "a"}))
    mixed.add_node(NodeSpec("b", gpu_model=H100, gpus=8, labels={"pool": "b"}))
    d = dispatcher(cluster("w", mixed, price=1.0))
    gang = job("gang", {"pool": "a"}, pods=2, gpus=4)
    on_host = Workload(gang.name, gang.pod_sets, queue="team", topology=TopologyRequest(required="host"))
    decision = d.dispatch(on_host)
    assert isinstance(decision, NotDispatched)
    assert "8 GPUs needed in one host matching nodeSelector pool=a, at most 4 free in one" in decision.message


ODD_SELECTORS: list[dict[str, str]] = [
    {"pool": ""},
    {"pool": "a100-spot "},
    {"pool": "A100-SPOT"},
    {"pool": "a100-spot", "team": "x"},
    {"team": "x"},
    {"zone": "z1"},
    {"ünïcode/ключ": "値"},
    {"pool": "a100-spot", HOSTNAME: "w-h1"},
    {HOSTNAME: "elsewhere"},
]


@pytest.mark.parametrize("selector", ODD_SELECTORS, ids=repr)
def test_odd_selectors_are_dispatched_exactly_where_the_placement_filter_finds_a_node(
    selector: dict[str, str],
) -> None:
    state = fleet("w", 3, {"pool": "a100-spot", "zone": "z1"})
    state.add_node(NodeSpec("x", gpu_model=H100, gpus=8, labels={"pool": "", "ünïcode/ключ": "値"}))
    request = PodRequest(gpus=8, node_selector=tuple(sorted(selector.items())))
    some_node = bool(static_mask(state, request).any())
    decision = dispatcher(cluster("w", state, price=1.0)).dispatch(job("j", selector))
    assert isinstance(decision, Dispatched) == some_node, decision


def affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}


AFFINITIES: list[dict[str, Any]] = [
    affinity({"key": "pool", "operator": "In", "values": ["a100-spot", "other"]}),
    affinity({"key": "pool", "operator": "In", "values": ["nowhere"]}),
    affinity({"key": "pool", "operator": "NotIn", "values": ["a100-spot"]}),
    affinity({"key": "pool", "operator": "NotIn", "values": ["a100-spot", "b"]}),
    affinity({"key": "team", "operator": "NotIn", "values": ["x"]}),
    affinity({"key": "pool", "operator": "Exists"}),
    affinity({"key": "team", "operator": "Exists"}),
    affinity({"key": "team", "operator": "DoesNotExist"}),
    affinity({"key": "pool", "operator": "DoesNotExist"}),
    affinity({"key": "gen", "operator": "Gt", "values": ["3"]}),
    affinity({"key": "gen", "operator": "Lt", "values": ["4"]}),
    affinity({"key": "pool", "operator": "Exists"}, {"key": "pool", "operator": "NotIn", "values": ["b"]}),
    {"nodeSelectorTerms": [{}]},
    {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["nowhere"]}]},
            {"matchExpressions": [{"key": "gen", "operator": "In", "values": ["4"]}]},
        ]
    },
]


@pytest.mark.parametrize("required", AFFINITIES, ids=repr)
def test_required_node_affinity_is_matched_as_the_cores_matcher_does(required: dict[str, Any]) -> None:
    hosts = [{"pool": "a100-spot", "gen": "4"}, {"pool": "b", "gen": "3"}]
    state = FleetState()
    for i, labels in enumerate(hosts):
        state.add_node(NodeSpec(f"h{i}", gpu_model=H100, gpus=8, labels=labels))
    selector = NodeSelector.model_validate(required)
    expected = any(node_selector_matches(selector, f"h{i}", labels) for i, labels in enumerate(hosts))
    obj = training_job(
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}}
    )
    decision = dispatcher(cluster("w", state, price=1.0)).dispatch(
        workload_of(obj), templates=template_rules(obj)
    )
    assert isinstance(decision, Dispatched) == expected, decision
    if not expected:
        assert isinstance(decision, NotDispatched) and "matches node affinity" in decision.message


def training_job(pod_spec: dict[str, Any], selector: dict[str, str] | None = None) -> TrainingJob:
    worker: dict[str, Any] = {"gpus": 8, "gpuModel": H100, "template": {"spec": pod_spec}}
    if selector is not None:
        worker["nodeSelector"] = selector
    obj = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "train", "namespace": "team"},
            "spec": {"queue": "team", "replicas": 1, "worker": worker},
        }
    )
    assert isinstance(obj, TrainingJob)
    return obj


def test_a_template_selector_counts_under_the_requests_own() -> None:
    state = fleet("w", 2, {"pool": "a"})
    obj = training_job({"nodeSelector": {"pool": "b"}}, selector={"pool": "a"})
    rules = template_rules(obj)
    assert rules == {"worker": HostRule((("pool", "b"),))}
    decision = dispatcher(cluster("w", state, price=1.0)).dispatch(workload_of(obj), templates=rules)
    assert cluster_of(decision) == "w", "the request's pool=a wins over the template's, as in the pod"
    template_only = training_job({"nodeSelector": {"pool": "b"}})
    refused = dispatcher(cluster("w", state, price=1.0)).dispatch(
        workload_of(template_only), templates=template_rules(template_only)
    )
    assert isinstance(refused, NotDispatched) and "matches nodeSelector pool=b" in refused.message


@pytest.mark.parametrize(
    ("pod_spec", "field"),
    [
        ({"nodeSelector": {"pool": 3}}, "spec.worker.template.spec.nodeSelector.pool"),
        ({"nodeSelector": ["pool=a"]}, "spec.worker.template.spec.nodeSelector"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": affinity(
                            {"key": "pool", "operator": "Near", "values": ["a"]}
                        )
                    }
                }
            },
            "spec.worker.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
            "nodeSelectorTerms.0.matchExpressions.0.operator",
        ),
    ],
)
def test_a_template_no_worker_could_turn_into_a_pod_is_refused_naming_the_field(
    pod_spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        template_rules(training_job(pod_spec))
    assert caught.value.obj == "TrainingJob team/train" and caught.value.field == field


def test_a_selector_on_a_key_the_report_leaves_out_is_not_checked() -> None:
    state = fleet("w", 2, {"pool": "a", "rack": "r1"}, levels=("rack",))
    d = dispatcher(cluster("w", state, price=1.0))
    assert cluster_of(d.dispatch(job("on-rack", {"rack": "r7"}))) == "w", "rack is a level: not listed"
    assert isinstance(d.dispatch(job("on-pool", {"pool": "b"})), NotDispatched)


def test_the_groups_round_trip_through_the_cluster_status() -> None:
    state = fleet("w", 3, {"pool": "a", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    capacity = capacity_status(summarize(state))
    report = capacity[H100].host_labels
    assert report is not None
    assert report.common == {"pool": "a", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert [g.labels for g in report.groups] == [{HOSTNAME: f"w-h{i}"} for i in range(3)]
    back = summary_of(Cluster.model_validate(reported(capacity=capacity)), now=NOW)
    labels = back.models[H100].host_labels
    assert labels is not None and [g.labels["pool"] for g in labels.groups] == ["a", "a", "a"]
    assert labels.groups == summarize(state)[H100].host_labels.groups  # type: ignore[union-attr]
    d = dispatcher(back)
    assert cluster_of(d.dispatch(job("a", {"pool": "a"}))) == "w1"
    assert isinstance(d.dispatch(job("b", {"pool": "b"})), NotDispatched)


def test_an_older_workers_report_without_groups_still_dispatches_a_job_with_a_selector() -> None:
    capacity = {H100: {"gpus": 32, "freeGpus": 32, "freeDomains": {"host": {"8": 4}}}}
    old = summary_of(Cluster.model_validate(reported(capacity=capacity)), now=NOW)
    assert old.models[H100].host_labels is None
    assert cluster_of(dispatcher(old).dispatch(job("j", {"pool": "anything"}))) == "w1"


def reported(*, capacity: dict[str, Any]) -> dict[str, object]:
    """A Cluster as read back from a store, with `capacity` (models, or dicts as an older worker wrote
    them) in its status."""
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
        model: c if isinstance(c, dict) else c.to_dict() for model, c in capacity.items()
    }
    return data


def node_affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}


def test_the_requests_own_node_affinity_counts_with_the_templates() -> None:
    pool_b = NodeSelector.model_validate(node_affinity({"key": "pool", "operator": "In", "values": ["b"]}))
    cheap = cluster("cheap", fleet("cheap", 2, {"pool": "a"}), 1.0)
    dear = cluster("dear", fleet("dear", 2, {"pool": "b", "gen": "3"}), 2.0)
    obj = training_job({})
    obj.spec.worker.node_affinity = pool_b
    decision = dispatcher(cheap, dear).dispatch(workload_of(obj), templates=template_rules(obj))
    assert cluster_of(decision) == "dear", "only the dearer cluster has a host the worker's affinity accepts"
    # The template asks for gen > 3 too: both must hold, and no host satisfies both.
    gen = node_affinity({"key": "gen", "operator": "Gt", "values": ["3"]})
    both = training_job(
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": gen}}}
    )
    both.spec.worker.node_affinity = pool_b
    refused = dispatcher(cheap, dear).dispatch(workload_of(both), templates=template_rules(both))
    assert isinstance(refused, NotDispatched), refused
    assert "node affinity (gen Gt [3] and pool In [b])" in refused.message, refused.message
