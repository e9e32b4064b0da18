"""Real-shaped Nodes and Pods translated into the core's NodeSpec, PodRequest and Workload."""

from __future__ import annotations

import json

import pytest

from gpufleet.api.errors import ValidationError
from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.request import Taint, Toleration
from gpufleet.fleet.state import FleetState
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.nodes import model_of_product, node_spec
from gpufleet.kube.pods import effective_requests, group_pods, pod_request, workload

from .fixtures import gang, node, pod

CFG = KubeConfig()


def test_an_hgx_node_is_eight_exclusive_h100s_with_its_allocatable_cpu_and_memory() -> None:
    spec = node_spec(node("gpu-1", labels={"gpufleet.io/rack": "r1"}), CFG)
    assert spec.gpu_model == "H100-80GB" and spec.gpus == 8 and spec.sharing is SharingMode.EXCLUSIVE
    assert spec.cpu_milli == 223_500 and spec.memory_mib == 2_062_834  # 2112341300Ki, rounded up to MiB
    assert spec.gpu_memory_mib == 81559
    assert spec.labels["zone"] == "us-east-1a" and spec.labels["rack"] == "r1" and "block" not in spec.labels
    assert not spec.unschedulable and spec.unhealthy_gpus == () and spec.nvlink_domains is None


def test_gpus_missing_from_allocatable_are_unhealthy_and_the_annotation_says_which() -> None:
    assert node_spec(node("n", allocatable_gpus=6), CFG).unhealthy_gpus == (6, 7)
    named = node("n", allocatable_gpus=7, annotations={"gpufleet.io/unhealthy-gpus": "3"})
    assert node_spec(named, CFG).unhealthy_gpus == (3,)


def test_not_ready_or_cordoned_nodes_take_no_pods_and_taints_are_kept() -> None:
    assert node_spec(node("n", ready=False), CFG).unschedulable
    assert node_spec(node("n", unschedulable=True), CFG).unschedulable
    tainted = node("n", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    assert node_spec(tainted, CFG).taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)


def test_time_slicing_from_gfd_labels_counts_physical_gpus() -> None:
    labels = {
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
        "nvidia.com/gpu.count": "8",
    }
    spec = node_spec(node("n", gpus=32, labels=labels), CFG)
    assert spec.sharing is SharingMode.TIME_SLICING and spec.replicas == 4 and spec.gpus == 8
    assert spec.gpu_model == "H100-80GB"
    mps = dict(labels, **{"nvidia.com/gpu.sharing-strategy": "mps"})
    assert node_spec(node("n", gpus=32, labels=mps), CFG).sharing is SharingMode.MPS


def test_mixed_mig_resources_are_laid_out_on_the_physical_gpus() -> None:
    extra = {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-2g.20gb": "2", "nvidia.com/mig-1g.10gb": "4"}
    spec = node_spec(node("n", gpus=0, extra=extra, labels={"nvidia.com/gpu.count": "2"}), CFG)
    assert spec.sharing is SharingMode.MIG and spec.gpus == 2
    balanced = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    assert spec.mig_layouts == {0: balanced, 1: balanced}
    fleet = FleetState()
    fleet.add_node(spec)  # the layout obeys the placement rules
    exact = node(
        "n", gpus=0, extra=extra, annotations={"gpufleet.io/mig-layout": json.dumps({"0": ["7g.80gb"]})}
    )
    assert node_spec(exact, CFG).mig_layouts == {0: ("7g.80gb",)}


def test_nvlink_domains_and_bad_annotations() -> None:
    pairs = node("n", gpus=4, annotations={"gpufleet.io/nvlink-domains": "[[0,1],[2,3]]"})
    assert node_spec(pairs, CFG).nvlink_domains == ((0, 1), (2, 3))
    with pytest.raises(ValidationError, match=r"Node n: field metadata\.annotations"):
        node_spec(node("n", annotations={"gpufleet.io/nvlink-domains": "pairs"}), CFG)


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "A100-80GB"),
        ("NVIDIA-L4", "L4"),
        ("Tesla-T4-SHARED", "T4"),
    ],
)
def test_gfd_products_map_to_catalogue_models(product: str, model: str) -> None:
    assert model_of_product(product) == model


def test_pod_requests_follow_kube_scheduler_rules() -> None:
    p = pod("p", gpus=2)
    p["spec"]["initContainers"] = [
        {"name": "fetch", "resources": {"requests": {"cpu": "16", "memory": "1Gi"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
    ]
    p["spec"]["overhead"] = {"cpu": "250m"}
    assert effective_requests(p) == {"cpu": 16_750, "memory": 65_536, "nvidia.com/gpu": 2}
    request = pod_request(p, CFG)
    assert request.gpus == 2 and request.cpu_milli == 16_750 and request.memory_mib == 65_536


def test_shares_mig_models_selectors_and_tolerations() -> None:
    share = pod("s", gpus=1, annotations={"gpufleet.io/gpu-milli": "250"})
    assert pod_request(share, CFG).gpu_milli == 250 and pod_request(share, CFG).gpus == 0
    shared = pod("s", gpus=None, resources={"nvidia.com/gpu.shared": "1"})
    assert pod_request(shared, CFG).gpu_milli == CFG.shared_gpu_milli
    mig = pod("m", gpus=None, resources={"nvidia.com/mig-3g.40gb": "1"})
    assert pod_request(mig, CFG).mig == "3g.40gb"
    selected = pod(
        "x",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "a"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    request = pod_request(selected, CFG)
    assert request.gpu_models == ("H100-80GB",) and request.node_selector == (("pool", "a"),)
    assert Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule") in request.tolerations
    with pytest.raises(ValidationError, match="Pod team-a/bad"):
        pod_request(pod("bad", gpus=1, resources={"nvidia.com/mig-1g.10gb": "1"}), CFG)


def test_gangs_group_by_label_and_wait_for_all_members() -> None:
    members = gang(
        "llm",
        4,
        labels={"gpufleet.io/gang-min-size": "2"},
        annotations={"gpufleet.io/topology-required": "rack", "gpufleet.io/preemptible": "false"},
    )
    others = [
        pod("single", labels={"gpufleet.io/queue": "team-b"}, priority=1000),
        pod("theirs", scheduler="default-scheduler"),
    ]
    groups = group_pods(members[:3] + others, CFG)
    assert sorted(groups) == ["team-a/llm", "team-a/single"]
    assert not groups["team-a/llm"].complete
    groups = group_pods(members + others, CFG)
    llm = workload(groups["team-a/llm"], CFG, {})
    assert llm.queue == "team-a" and llm.pod_sets[0].count == 4 and llm.pod_sets[0].minimum == 2
    assert llm.topology.required == "rack" and not llm.preemptible and llm.pod_sets[0].request.gpus == 8
    assert groups["team-a/llm"].pod_name(members[2]) == "team-a/llm/main/2"
    single = workload(groups["team-a/single"], CFG, {})
    assert single.queue == "team-b" and single.priority == 1000 and single.pod_count == 1


def test_finished_and_deleting_pods_are_not_workloads() -> None:
    done = pod("done", phase="Succeeded")
    leaving = pod("leaving")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    assert group_pods([done, leaving], CFG) == {}


def test_mismatched_gang_members_are_refused() -> None:
    members = gang("g", 2)
    members[1]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    members[1]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "4"
    with pytest.raises(ValidationError, match="gang team-a/g"):
        workload(group_pods(members, CFG)["team-a/g"], CFG, {})


def _changed(change: str) -> dict:
    p = pod("p", gpus=1)
    spec, meta = p["spec"], p["metadata"]
    if change == "limits":
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
        spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    elif change == "selector":
        spec["nodeSelector"] = {"gpufleet.io/gpu-model": "A100-80GB"}
    elif change == "toleration":
        spec["tolerations"] = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    elif change == "milli":
        meta.setdefault("annotations", {})["gpufleet.io/gpu-milli"] = "250"
    elif change == "cuda":
        meta.setdefault("annotations", {})["gpufleet.io/cuda-version"] = "12.4"
    elif change == "overhead":
        spec["overhead"] = {"cpu": "2"}
    elif change == "sidecar":
        side = {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "4"}}}
        spec["initContainers"] = [side]
    return p


@pytest.mark.parametrize(
    "change", ["limits", "selector", "toleration", "milli", "cuda", "overhead", "sidecar"]
)
def test_pods_of_one_template_are_translated_once_and_any_difference_counts(change: str) -> None:
    config = KubeConfig()
    base = pod_request(pod("a", gpus=1), config)
    assert pod_request(pod("b", gpus=1), config) is base  # the same template: the same translation
    other = pod_request(_changed(change), config)
    assert other != base
    assert pod_request(_changed(change), KubeConfig(shared_gpu_milli=config.shared_gpu_milli)) == other


def test_gpu_model_aliases_in_labels_and_selectors_are_the_catalogues_names() -> None:
    """A node labelled `H100` and a pod selecting `H100` both mean H100-80GB, the name a pool or job of
    the embedded world is stored under: placement compares the names exactly."""
    labelled = node_spec(node("n", labels={"gpufleet.io/gpu-model": "H100"}), CFG)
    assert labelled.gpu_model == "H100-80GB"
    asking = pod("x", node_selector={"gpufleet.io/gpu-model": "nvidia h100 80gb hbm3"})
    assert pod_request(asking, CFG).gpu_models == ("H100-80GB",)
    unknown = node_spec(node("m", labels={"gpufleet.io/gpu-model": "MI300X"}), CFG)
    assert unknown.gpu_model == "MI300X"  # a model the catalogue lacks keeps its name
