"""CUDA versions in the Kubernetes world: driver labels on Nodes, the annotation on pods, the operator's
pods, and the scheduler placing annotated pods only where the driver runs them."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.api import ObjectMeta, Queue, QueueSpec
from gpufleet.api.errors import ValidationError
from gpufleet.api.queue import FlavorQuota
from gpufleet.api.requests import PodRequest as ApiPodRequest
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.nodes import node_spec
from gpufleet.kube.pods import pod_request
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore
from gpufleet.kube.training import pod_from_template

from .fakeapi import FakeApiServer
from .fixtures import GFD_H100, node, pod

NODES = "/api/v1/nodes"
CUDA = "gpufleet.io/cuda-version"
OLD_DRIVER = {  # a CUDA 11.4-era node, as GFD labels it (both label sets, as the agent writes them)
    "nvidia.com/cuda.driver-version.full": "470.82.01",
    "nvidia.com/cuda.driver-version.major": "470",
    "nvidia.com/cuda.driver-version.minor": "82",
    "nvidia.com/cuda.driver-version.revision": "01",
    "nvidia.com/cuda.driver.major": "470",
    "nvidia.com/cuda.driver.minor": "82",
    "nvidia.com/cuda.driver.rev": "01",
}


def without_driver_labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = obj["metadata"]["labels"]
    for key in [k for k in labels if k.startswith("nvidia.com/cuda.driver")]:
        del labels[key]
    return obj


# ------------------------------------------------------------------------------- translation
def test_the_driver_comes_from_gfd_labels_newest_label_set_first() -> None:
    config = KubeConfig()
    assert GFD_H100["nvidia.com/cuda.driver-version.full"] == "570.124.06"
    assert node_spec(node("n"), config).driver_version == "570.124.06"
    assert node_spec(node("n", labels=OLD_DRIVER), config).driver_version == "470.82.01"
    # Only the deprecated labels (an older GFD): major.minor.rev.
    legacy = without_driver_labels(node("n"))
    legacy["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "535",
            "nvidia.com/cuda.driver.minor": "104",
            "nvidia.com/cuda.driver.rev": "05",
        }
    )
    assert node_spec(legacy, config).driver_version == "535.104.05"
    assert node_spec(without_driver_labels(node("n")), config).driver_version == ""


def test_a_malformed_driver_label_names_the_node_and_the_label() -> None:
    bad = node("n", labels={"nvidia.com/cuda.driver-version.full": "570.x"})
    with pytest.raises(ValidationError, match=r"Node n: field metadata\.labels\[nvidia\.com/cuda\.driver"):
        node_spec(bad, KubeConfig())


def test_the_annotation_is_the_pods_cuda_version() -> None:
    config = KubeConfig()
    assert pod_request(pod("p", annotations={CUDA: "12.8"}), config).cuda_version == (12, 8)
    assert pod_request(pod("p", annotations={CUDA: "12.4.1"}), config).cuda_version == (12, 4)
    assert pod_request(pod("p"), config).cuda_version is None
    with pytest.raises(
        ValidationError, match=r"Pod team-a/p: field metadata\.annotations\[gpufleet\.io/cuda"
    ):
        pod_request(pod("p", annotations={CUDA: "twelve"}), config)


def test_the_operators_pods_carry_the_workers_cuda_version() -> None:
    config = KubeConfig()
    request = ApiPodRequest.model_validate(
        {
            "gpus": 8,
            "cudaVersion": "12.8",
            "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
        }
    )
    made = pod_from_template(
        request,
        name="llm-0",
        namespace="team-a",
        labels={},
        annotations={},
        env=[],
        owner={},
        preemptible=True,
        config=config,
        overrides={},
    )
    assert made["metadata"]["annotations"][CUDA] == "12.8"
    assert pod_request(made, config).cuda_version == (12, 8)


# ------------------------------------------------------------------------------- scheduling
def add_node(api: FakeApiServer, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    api.put(NODES, obj)
    # Play the node lifecycle controller: a Ready node loses the not-ready taint.
    patch = {"spec": {"taints": None}}
    api.request("PATCH", f"{NODES}/{name}", body=patch, content_type="application/merge-patch+json")


def add_pod(api: FakeApiServer, obj: dict[str, Any]) -> None:
    api.put(f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods", obj)


def run(sched: KubeScheduler) -> None:
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    sched.schedule_once()


def bound(api: FakeApiServer) -> dict[str, str]:
    return {
        name: p["spec"]["nodeName"]
        for (ns, name), p in api.objects.get("/v1/pods", {}).items()
        if ns == "team-a" and p["spec"].get("nodeName")
    }


def scheduled(api: FakeApiServer, name: str) -> dict[str, Any] | None:
    found = api.objects["/v1/pods"][("team-a", name)]
    return next((c for c in found["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)


@pytest.fixture
def sched(api: FakeApiServer) -> KubeScheduler:
    store = KubeStore(api)
    for name in ("default", "team-a"):
        quota = {"H100-80GB": FlavorQuota(nominal=1000)}
        store.create(Queue(metadata=ObjectMeta(name=name), spec=QueueSpec(quotas=quota)))
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


def test_an_annotated_pod_goes_only_to_the_node_whose_driver_runs_it(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, node("a-old", labels=OLD_DRIVER))
    add_node(api, node("b-new"))  # GFD_H100: driver 570.124.06
    # Half of a-old is taken: packing would put the next 4-GPU pod there, were it not for its driver.
    add_pod(api, pod("theirs", gpus=4, node_name="a-old", scheduler="default-scheduler", phase="Running"))
    add_pod(api, pod("cuda", gpus=4, annotations={CUDA: "12.8"}))
    run(sched)
    assert bound(api) == {"theirs": "a-old", "cuda": "b-new"}

    # b-new fills up. A second 12.8 pod finds room only on a-old, whose driver is too old: it waits and
    # says why, while a pod that states no version takes that room.
    add_pod(api, pod("theirs-2", gpus=4, node_name="b-new", scheduler="default-scheduler", phase="Running"))
    add_pod(api, pod("cuda-late", gpus=4, annotations={CUDA: "12.8"}, created="2026-11-29T11:02:00Z"))
    add_pod(api, pod("plain", gpus=4, created="2026-11-29T11:03:00Z"))
    run(sched)
    assert "cuda-late" not in bound(api) and bound(api)["plain"] == "a-old"
    why = scheduled(api, "cuda-late")
    assert why is not None and why["status"] == "False", why
    assert "1 CudaDriver, 1 InsufficientGPU" in why["message"], why["message"]
    assert "CUDA 12.8 needs an NVIDIA driver >= 525.60.13" in why["message"], why["message"]
    assert "the newest driver on a node of model H100-80GB is 570.124.06" in why["message"], why["message"]


def test_no_node_with_a_new_enough_driver_names_version_and_newest_driver(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, node("a-old", labels=OLD_DRIVER))
    add_pod(api, pod("cuda13", gpus=1, annotations={CUDA: "13.0"}))
    run(sched)
    assert bound(api) == {}
    why = scheduled(api, "cuda13")
    assert why is not None and why["message"].startswith("NoFit"), why
    assert "CUDA 13.0" in why["message"] and ">= 580" in why["message"], why["message"]
    assert "470.82.01" in why["message"], why["message"]
    # A node without driver labels is one whose driver is unknown: it may run the pod.
    add_node(api, without_driver_labels(node("c-unlabelled")))
    run(sched)
    assert bound(api) == {"cuda13": "c-unlabelled"}
