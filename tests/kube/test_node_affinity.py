"""Required node affinity in the Kubernetes world: read from the pod, honoured by the scheduler, a malformed
one reported on its pod without holding up the others, and the operator's pods carrying a worker's."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.api import ObjectMeta, Queue, QueueSpec
from gpufleet.api.errors import ValidationError
from gpufleet.api.queue import FlavorQuota
from gpufleet.api.requests import PodRequest as ApiPodRequest
from gpufleet.fleet.request import node_selector_matches
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.pods import pod_request
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore
from gpufleet.kube.training import pod_from_template

from .fakeapi import FakeApiServer
from .fixtures import node, pod

NODES = "/api/v1/nodes"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
FIELD = f"spec.affinity.nodeAffinity.{REQUIRED}"


def with_affinity(obj: dict[str, Any], *terms: dict[str, Any], preferred: bool = False) -> dict[str, Any]:
    node_affinity: dict[str, Any] = {REQUIRED: {"nodeSelectorTerms": list(terms)}}
    if preferred:  # read by kube-scheduler's scoring only; gpufleet ignores it
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100, "preference": {"matchExpressions": [zone("In", "a")]}}
        ]
    obj["spec"]["affinity"] = {"nodeAffinity": node_affinity}
    return obj


def zone(operator: str, *values: str) -> dict[str, Any]:
    return {"key": "topology.kubernetes.io/zone", "operator": operator, "values": list(values)}


def add_node(api: FakeApiServer, obj: dict[str, Any]) -> None:
    api.put(NODES, obj)
    patch = {"spec": {"taints": None}}  # the node lifecycle controller's part: Ready, untainted
    api.request(
        "PATCH", f"{NODES}/{obj['metadata']['name']}", body=patch, content_type="application/merge-patch+json"
    )


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


def scheduled(api: FakeApiServer, name: str) -> dict[str, Any]:
    found = api.objects["/v1/pods"][("team-a", name)]
    return next(c for c in found["status"].get("conditions", []) if c["type"] == "PodScheduled")


@pytest.fixture
def sched(api: FakeApiServer) -> KubeScheduler:
    store = KubeStore(api)
    for name in ("default", "team-a"):
        quota = {"H100-80GB": FlavorQuota(nominal=1000)}
        store.create(Queue(metadata=ObjectMeta(name=name), spec=QueueSpec(quotas=quota)))
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


# ------------------------------------------------------------------------------- translation
def test_the_pods_required_terms_become_the_requests_affinity() -> None:
    config = KubeConfig()
    request = pod_request(with_affinity(pod("p"), {"matchExpressions": [zone("In", "b")]}), config)
    assert request.node_affinity is not None
    assert node_selector_matches(request.node_affinity, "n", {"topology.kubernetes.io/zone": "b"})
    assert not node_selector_matches(request.node_affinity, "n", {"topology.kubernetes.io/zone": "a"})
    assert pod_request(pod("p"), config).node_affinity is None
    # Pods of one template with other affinities are other requests (the translation memo keys on it).
    other = pod_request(with_affinity(pod("q"), {"matchExpressions": [zone("In", "a")]}), config)
    assert other != request


@pytest.mark.parametrize(
    ("requirement", "where", "message"),
    [
        (zone("Near", "a"), "matchExpressions[0].operator", "must be one of"),
        (zone("In"), "matchExpressions[0].values", "must not be empty with operator In"),
        (zone("Exists", "a"), "matchExpressions[0].values", "must be empty with operator Exists"),
        (zone("Gt", "1", "2"), "matchExpressions[0].values", "exactly one value"),
        (zone("Lt", "x"), "matchExpressions[0].values[0]", "must be an integer"),
    ],
)
def test_a_malformed_requirement_names_the_pod_and_the_field(
    requirement: dict[str, Any], where: str, message: str
) -> None:
    bad = with_affinity(pod("p"), {"matchExpressions": [requirement]})
    with pytest.raises(ValidationError) as caught:
        pod_request(bad, KubeConfig())
    assert caught.value.obj == "Pod team-a/p"
    assert caught.value.field == f"{FIELD}.nodeSelectorTerms[0].{where}"
    assert message in caught.value.detail


# ------------------------------------------------------------------------------- scheduling
def test_a_pod_is_bound_only_to_a_node_its_required_affinity_accepts(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, node("a-0", labels={"topology.kubernetes.io/zone": "a"}))
    add_node(api, node("b-0", labels={"topology.kubernetes.io/zone": "b"}))
    # Preferred affinity asks for zone a; it is not read: only the required term decides.
    add_pod(api, with_affinity(pod("to-b", gpus=8), {"matchExpressions": [zone("In", "b")]}, preferred=True))
    add_pod(api, with_affinity(pod("by-name", gpus=4), {"matchFields": [by_name("a-0")]}))
    run(sched)
    assert bound(api) == {"to-b": "b-0", "by-name": "a-0"}

    # Zone b is full: another pod for it waits and says why, though a-0 has 4 free GPUs.
    add_pod(api, with_affinity(pod("late", gpus=4), {"matchExpressions": [zone("In", "b")]}))
    run(sched)
    assert "late" not in bound(api)
    why = scheduled(api, "late")
    assert why["status"] == "False" and "1 NodeAffinity, 1 InsufficientGPU" in why["message"], why


def by_name(name: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [name]}


def test_a_malformed_affinity_is_reported_on_its_pod_and_the_others_are_bound(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, node("a-0", labels={"topology.kubernetes.io/zone": "a"}))
    add_pod(api, with_affinity(pod("bad"), {"matchExpressions": [zone("In")]}))
    add_pod(api, pod("fine"))
    run(sched)
    assert bound(api) == {"fine": "a-0"}
    why = scheduled(api, "bad")
    assert why["status"] == "False" and why["message"].startswith("InvalidRequest"), why
    assert f"Pod team-a/bad: field {FIELD}.nodeSelectorTerms[0].matchExpressions[0].values" in why["message"]


# ------------------------------------------------------------------------------- operator
def operators_pod(request: ApiPodRequest) -> dict[str, Any]:
    return pod_from_template(
        request,
        name="llm-0",
        namespace="team-a",
        labels={},
        annotations={},
        env=[],
        owner={},
        preemptible=True,
        config=KubeConfig(),
        overrides={},
    )


def test_the_operators_pods_carry_the_workers_node_affinity_and_the_templates_too() -> None:
    container = {"name": "t", "image": "i"}
    request = ApiPodRequest.model_validate(
        {
            "gpus": 8,
            "nodeAffinity": {"nodeSelectorTerms": [{"matchExpressions": [zone("In", "b")]}]},
            "template": {"spec": {"containers": [container]}},
        }
    )
    made = pod_request(operators_pod(request), KubeConfig())
    assert made.node_affinity == request.node_affinity

    # The template asks for a GPU generation too: the pod must satisfy both.
    gen = {"key": "gen", "operator": "Gt", "values": ["3"]}
    template = {"spec": {"containers": [container]}}
    with_affinity(template, {"matchExpressions": [gen]})
    both = pod_request(operators_pod(request.model_copy(update={"template": template})), KubeConfig())
    assert both.node_affinity is not None
    zone_b = "topology.kubernetes.io/zone"
    assert node_selector_matches(both.node_affinity, "n", {zone_b: "b", "gen": "4"})
    assert not node_selector_matches(both.node_affinity, "n", {zone_b: "b", "gen": "3"})
    assert not node_selector_matches(both.node_affinity, "n", {zone_b: "a", "gen": "4"})
