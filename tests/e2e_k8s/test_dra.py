"""DRA on a real API server: a DeviceClass, the ResourceSlices fake nodes publish (the gpu.nvidia.com
shape the twin and the agent publish), a ResourceClaimTemplate and pods using it. The controller
manager's resource-claim controller makes each pod's claim (claim_controller.py starts one where the
cluster's controller manager does not run it); gpufleet's scheduler allocates it, reserves
it for the pod and binds the pod to the node the devices are on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.sharing.dra_slices import node_slices

from .claim_controller import resource_claim_controller
from .conftest import RUN, Cluster, controller_manager_runs, wait_for

pytestmark = pytest.mark.k8s

DRA = "/apis/resource.k8s.io/v1"
CLASS = f"e2e-{RUN}.gpu.nvidia.com"


@pytest.fixture(scope="module")
def claims_from_templates(api: Transport, namespace: str) -> Iterator[str]:
    """The resource-claim controller: the cluster's, or one started for this module."""
    if not controller_manager_runs(api, namespace):
        pytest.skip("no controller manager: the garbage collector would not remove a pod's claim")
    try:
        with resource_claim_controller(api, namespace, RUN, os.environ["KUBECONFIG"]) as how:
            yield how
    except LookupError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def dra(cluster: Cluster, claims_from_templates: str) -> Iterator[list[str]]:
    """The run's DeviceClass; yields the ResourceSlices the test publishes, all removed at the end."""
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


def dra_node(
    cluster: Cluster,
    slices: list[str],
    name: str,
    gpus: int = 8,
    cliques: list[str] | None = None,
    mig_gpus: tuple[int, ...] = (),
) -> str:
    """A node that advertises no nvidia.com/gpu and publishes its GPUs in ResourceSlices (GPU i in NVLink
    clique `cliques[i]`, when given; the GPUs `mig_gpus` as partitionable devices with shared counters)."""
    full = cluster.node(name, gpus=0)
    by_index = {i: f"{RUN}.{clique}" for i, clique in enumerate(cliques or [])}
    made = node_slices(full, gpu_model="H100-80GB", gpus=gpus, cliques=by_index, mig_gpus=mig_gpus)
    for i, spec in enumerate(made):
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{full}-gpu.nvidia.com-{i}"},
            "spec": spec.to_dict(),
        }
        slices.append(cluster.api.request("POST", f"{DRA}/resourceslices", body=body)["metadata"]["name"])
    return full


def template(
    cluster: Cluster, name: str, count: int, *, match: str | None = None, profile: str | None = None
) -> None:
    """A template of `count` GPUs (or one MIG instance of `profile`) of the run's class."""
    exactly: Json = {"deviceClassName": CLASS, "count": count}
    if profile:
        attributes = 'device.attributes["gpu.nvidia.com"]'
        selector = f'{attributes}.type == "mig" && {attributes}.profile == "{profile}"'
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": exactly}],
                    **({"constraints": [{"requests": ["gpus"], "matchAttribute": match}]} if match else {}),
                }
            }
        },
    }
    cluster.api.request("POST", f"{DRA}/namespaces/{cluster.namespace}/resourceclaimtemplates", body=body)


def claim_pod(
    cluster: Cluster,
    name: str,
    template_name: str | None = None,
    *,
    claim: str | None = None,
    queue: str = "",
    labels: dict[str, str] | None = None,
) -> Json:
    """A pod asking GPUs only through a claim: made from `template_name`, or the named shared `claim`."""
    entry = {"name": "gpu"}
    entry.update(
        {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template_name or ""}
    )
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {"gpufleet.io/queue": queue or cluster.queue, **(labels or {})},
        },
        "spec": {
            "schedulerName": cluster.scheduler_name,
            "nodeSelector": dict(cluster.selector),
            "terminationGracePeriodSeconds": 5,
            "resourceClaims": [entry],
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
        named = cluster.get_pod(pod)["spec"]["resourceClaims"][0].get("resourceClaimName")
        if not named:
            return None
        name = named
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


def claims_path(cluster: Cluster) -> str:
    return f"{DRA}/namespaces/{cluster.namespace}/resourceclaims"


def test_dra_a_shared_claim_is_allocated_once_and_reserved_for_each_pod(
    cluster: Cluster, scheduler: Any, dra: list[str]
) -> None:
    dra_node(cluster, dra, "dra-a")
    dra_node(cluster, dra, "dra-b")
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared-pair", "namespace": cluster.namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": 2}}]}
        },
    }
    cluster.api.request("POST", claims_path(cluster), body=body)
    uids = {claim_pod(cluster, name, claim="shared-pair")["metadata"]["uid"] for name in ("s-0", "s-1")}
    wait_for("both pods bound", lambda: cluster.node_of("s-0") and cluster.node_of("s-1"), timeout=60)
    node = cluster.node_of("s-0")
    assert cluster.node_of("s-1") == node
    status = cluster.api.request("GET", f"{claims_path(cluster)}/shared-pair")["status"]
    results = status["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {node}
    assert {r["uid"] for r in status["reservedFor"]} == uids
    # Both pods gone: no one reserves the claim, so it is deallocated.
    cluster.delete_pod("s-0")
    cluster.delete_pod("s-1")

    def deallocated() -> bool:
        left = cluster.api.request("GET", f"{claims_path(cluster)}/shared-pair").get("status") or {}
        return not left.get("reservedFor") and not left.get("allocation")

    wait_for("the shared claim deallocated", deallocated, timeout=30)


def test_dra_claims_exceeding_the_queue_quota_pend_with_quota_exceeded(
    cluster: Cluster, scheduler: Any, dra: list[str]
) -> None:
    queue = f"e2e-{RUN}-small"
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": queue},
        "spec": {"quotas": {"H100-80GB": {"nominal": 4}}},
    }
    cluster.api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)
    try:
        dra_node(cluster, dra, "dra-a")
        template(cluster, "four-gpus-q", 4)
        claim_pod(cluster, "q-0", "four-gpus-q", queue=queue)
        wait_for("the first pod bound", lambda: cluster.node_of("q-0"), timeout=60)
        claim_pod(cluster, "q-1", "four-gpus-q", queue=queue)
        # Until the controller manager makes its claim the pod waits for it (ClaimsNotReady); then for quota.
        reason = wait_for(
            "QuotaExceeded",
            lambda: (
                (c := cluster.condition("q-1", "PodScheduled"))
                and c["message"].startswith("QuotaExceeded")
                and c
            ),
            timeout=60,
        )
        assert reason["status"] == "False"
        assert cluster.node_of("q-1") is None
        made = claim_of(cluster, "q-1")
        assert made is not None and not (made.get("status") or {}).get("allocation")
    finally:
        with contextlib.suppress(ApiError):
            cluster.api.request("DELETE", f"/apis/gpufleet.io/v1alpha1/queues/{queue}")


def test_dra_preemption_hands_the_victims_devices_to_the_preemptor(
    cluster: Cluster, scheduler: Any, dra: list[str]
) -> None:
    node = dra_node(cluster, dra, "dra-a")
    template(cluster, "eight-gpus", 8)
    claim_pod(cluster, "low", "eight-gpus", labels={"gpufleet.io/priority-class": "research"})
    wait_for("the low-priority pod bound", lambda: cluster.node_of("low"), timeout=60)
    victim = claim_of(cluster, "low")
    assert victim is not None
    devices = {r["device"] for r in victim["status"]["allocation"]["devices"]["results"]}
    claim_pod(cluster, "urgent", "eight-gpus", labels={"gpufleet.io/priority-class": "production-training"})
    wait_for("the victim asked to stop", lambda: cluster.get_pod("low")["metadata"].get("deletionTimestamp"))
    cluster.finish_deleting()  # without kubelets the victim never finishes on its own
    assert wait_for("the preemptor bound", lambda: cluster.node_of("urgent"), timeout=60) == node
    taken = claim_of(cluster, "urgent")
    assert taken is not None
    assert {r["device"] for r in taken["status"]["allocation"]["devices"]["results"]} == devices
    path = f"{claims_path(cluster)}/{victim['metadata']['name']}"

    def released() -> bool:
        try:
            left = cluster.api.request("GET", path)
        except ApiError as exc:
            return exc.status == 404
        return not (left.get("status") or {}).get("allocation")

    wait_for("the victim's claim deallocated", released, timeout=30)


def test_dra_a_gang_of_four_pods_of_eight_gpus_in_one_nvlink_clique_each(
    cluster: Cluster, scheduler: Any, dra: list[str]
) -> None:
    whole = [dra_node(cluster, dra, f"nvl-{n}", cliques=[f"c{n}"] * 8) for n in range(4)]
    split = dra_node(cluster, dra, "nvl-split", cliques=["x"] * 4 + ["y"] * 4)
    template(cluster, "eight-in-a-clique", 8, match="gpu.nvidia.com/cliqueId")
    labels = {"gpufleet.io/gang": "llm", "gpufleet.io/gang-size": "4"}
    pods = [f"llm-{i}" for i in range(4)]
    for name in pods:
        claim_pod(cluster, name, "eight-in-a-clique", labels=labels)
    wait_for("the gang bound", lambda: all(cluster.node_of(p) for p in pods), timeout=90)
    placed = [cluster.node_of(p) or "" for p in pods]
    assert sorted(placed) == sorted(whole) and split not in placed  # its GPUs span two cliques
    for name in pods:
        claim = claim_of(cluster, name)
        assert claim is not None and len(claim["status"]["allocation"]["devices"]["results"]) == 8


def test_dra_mig_partitions_of_one_gpu_are_shared_by_two_pods(
    cluster: Cluster, scheduler: Any, dra: list[str]
) -> None:
    # One H100 published as partitionable devices: the whole GPU and every MIG instance, all consuming
    # its counter set (8 memory slices, 7 compute slices). Two 3g.40gb instances (4 memory slices each)
    # fill it: a third pod's 1g.10gb instance is a device no claim holds, but it would exceed the
    # counters.
    queue = f"e2e-{RUN}-mig"
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": queue},
        "spec": {"quotas": {"3g.40gb": {"nominal": 8}, "1g.10gb": {"nominal": 8}}},
    }
    cluster.api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)
    try:
        node = dra_node(cluster, dra, "mig-a", gpus=1, mig_gpus=(0,))
        template(cluster, "half-gpu", 1, profile="3g.40gb")
        template(cluster, "tenth-gpu", 1, profile="1g.10gb")
        for name in ("mig-0", "mig-1"):
            claim_pod(cluster, name, "half-gpu", queue=queue)
        wait_for("both pods bound", lambda: cluster.node_of("mig-0") and cluster.node_of("mig-1"), timeout=60)
        devices: dict[str, str] = {}
        for name in ("mig-0", "mig-1"):
            assert cluster.node_of(name) == node
            claim = claim_of(cluster, name)
            assert claim is not None
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == node and result["request"] == "gpus"
            devices[name] = result["device"]
        # gpu-0-mig-<profile id>-<start>-<memory slices>: two instances of GPU 0 that do not overlap
        assert all(d.startswith("gpu-0-mig-") for d in devices.values()), devices
        starts = sorted(int(d.split("-")[4]) for d in devices.values())
        assert len(set(devices.values())) == 2 and starts[1] - starts[0] >= 4, devices
        claim_pod(cluster, "mig-2", "tenth-gpu", queue=queue)
        reason = wait_for(
            "the third pod's pending reason naming the request",
            lambda: (
                (c := cluster.condition("mig-2", "PodScheduled")) and "request gpus" in c["message"] and c
            ),
            timeout=60,
        )
        assert reason["status"] == "False" and "request gpus: shared counters" in reason["message"], reason
        assert cluster.node_of("mig-2") is None
        # One partition freed: the third pod gets the instance its claim can now have.
        cluster.delete_pod("mig-0")
        assert wait_for("the third pod bound", lambda: cluster.node_of("mig-2"), timeout=60) == node
    finally:
        with contextlib.suppress(ApiError):
            cluster.api.request("DELETE", f"/apis/gpufleet.io/v1alpha1/queues/{queue}")
