"""DRA on a real API server: a DeviceClass, the ResourceSlices fake nodes publish (the gpu.nvidia.com
shape the twin and the agent publish), a ResourceClaimTemplate and pods using it. The controller
manager's resource-claim controller makes each pod's claim; gpufleet's scheduler allocates it, reserves
it for the pod and binds the pod to the node the devices are on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.kube.transport import ApiError, Json
from gpufleet.sharing.dra_slices import node_slices

from .conftest import RUN, Cluster, controller_manager_runs, wait_for

pytestmark = pytest.mark.k8s

DRA = "/apis/resource.k8s.io/v1"
CLASS = f"e2e-{RUN}.gpu.nvidia.com"


@pytest.fixture
def dra(cluster: Cluster) -> Iterator[list[str]]:
    """The run's DeviceClass; yields the ResourceSlices the test publishes, all removed at the end."""
    if not controller_manager_runs(cluster.api, cluster.namespace):
        pytest.skip("no controller manager: nothing makes a pod's claim from its template")
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
    }
    cluster.api.request("POST", f"{DRA}/deviceclasses", body=body)
    slices: list[str] = []
    yield slices
    for name in slices:
        with contextlib.suppress(ApiError):
            cluster.api.request("DELETE", f"{DRA}/resourceslices/{name}")
    with contextlib.suppress(ApiError):
        cluster.api.request("DELETE", f"{DRA}/deviceclasses/{CLASS}")


def dra_node(cluster: Cluster, slices: list[str], name: str, gpus: int = 8) -> str:
    """A node that advertises no nvidia.com/gpu and publishes its GPUs in ResourceSlices."""
    full = cluster.node(name, gpus=0)
    for i, spec in enumerate(node_slices(full, gpu_model="H100-80GB", gpus=gpus)):
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{full}-gpu.nvidia.com-{i}"},
            "spec": _without_empty(spec.model_dump(by_alias=True, exclude_none=True, mode="json")),
        }
        slices.append(cluster.api.request("POST", f"{DRA}/resourceslices", body=body)["metadata"]["name"])
    return full


def _without_empty(value: Any) -> Any:
    """The slice without empty lists: the API server (1.36) takes an empty `sharedCounters` beside
    `devices` for both set, which it refuses."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v != []}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def template(cluster: Cluster, name: str, count: int) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": count}}]
                }
            }
        },
    }
    cluster.api.request("POST", f"{DRA}/namespaces/{cluster.namespace}/resourceclaimtemplates", body=body)


def claim_pod(cluster: Cluster, name: str, template_name: str) -> Json:
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {"gpufleet.io/queue": cluster.queue},
        },
        "spec": {
            "schedulerName": cluster.scheduler_name,
            "nodeSelector": dict(cluster.selector),
            "terminationGracePeriodSeconds": 5,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
            "containers": [
                {
                    "name": "worker",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    made: Json = cluster.api.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body=body)
    return made


def claim_of(cluster: Cluster, pod: str) -> Json | None:
    """The claim the resource-claim controller made for the pod, once the pod's status names it."""
    statuses = cluster.get_pod(pod).get("status", {}).get("resourceClaimStatuses") or []
    name = next((s.get("resourceClaimName") for s in statuses if s.get("name") == "gpu"), None)
    if not name:
        return None
    try:
        found: Json = cluster.api.request(
            "GET", f"{DRA}/namespaces/{cluster.namespace}/resourceclaims/{name}"
        )
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def test_dra_template_claims_are_allocated_on_the_node_each_pod_is_bound_to(
    cluster: Cluster, scheduler: Any, dra: list[str]
) -> None:
    nodes = {dra_node(cluster, dra, "dra-a"), dra_node(cluster, dra, "dra-b")}
    template(cluster, "four-gpus", 4)
    pods = ["train-0", "train-1", "train-2"]
    uids = {name: claim_pod(cluster, name, "four-gpus")["metadata"]["uid"] for name in pods}
    placed = wait_for("pods bound", lambda: all(cluster.node_of(p) for p in pods), timeout=60)
    assert placed
    taken: set[tuple[str, str]] = set()
    for name in pods:
        node = cluster.node_of(name)
        assert node in nodes
        claim = claim_of(cluster, name)
        assert claim is not None, f"pod {name} names no claim"
        status = claim["status"]
        results = status["allocation"]["devices"]["results"]
        assert len(results) == 4 and {r["pool"] for r in results} == {node}, results
        assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
        terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        assert [r["uid"] for r in status["reservedFor"]] == [uids[name]]
        devices = {(r["pool"], r["device"]) for r in results}
        assert not devices & taken, "a device was allocated to two claims"
        taken |= devices
    # 16 GPUs on two nodes, 12 taken: a fourth pod of 4 fits, on the node with 4 left, and a fifth
    # waits until a pod leaves and releases its claim.
    claim_pod(cluster, "train-3", "four-gpus")
    wait_for("fourth pod bound", lambda: cluster.node_of("train-3"), timeout=60)
    claim_pod(cluster, "train-4", "four-gpus")
    reason = wait_for(
        "fifth pod's pending reason", lambda: cluster.condition("train-4", "PodScheduled"), timeout=60
    )
    assert reason["status"] == "False"
    freed = cluster.node_of("train-0")
    released = claim_of(cluster, "train-0")
    assert released is not None
    cluster.delete_pod("train-0")
    wait_for(
        "fifth pod bound where the first one was", lambda: cluster.node_of("train-4") == freed, timeout=60
    )
    path = f"{DRA}/namespaces/{cluster.namespace}/resourceclaims/{released['metadata']['name']}"

    def let_go() -> bool:
        try:
            left = cluster.api.request("GET", path)
        except ApiError as exc:
            return exc.status == 404  # the garbage collector deleted the pod's claim
        return not (left.get("status") or {}).get("reservedFor")

    wait_for("the deleted pod's claim released", let_go, timeout=30)
