"""The secondary scheduler with DRA against the in-memory API server: pods whose resourceClaims name a
ResourceClaim or one made from a template are placed by the core, their claims allocated and reserved
before the Binding, and released when the pod goes."""

from __future__ import annotations

from typing import Any

from gpufleet.kube.actions import Actions
from gpufleet.kube.binder import Binder, BindResult
from gpufleet.kube.claim_writes import ClaimWrite
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.sharing.dra_slices import node_slices

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import add_node, add_queues, bound

DRA = "/apis/resource.k8s.io/v1"
CLAIMS = f"{DRA}/namespaces/team-a/resourceclaims"
CLAIMS_KEY = "resource.k8s.io/v1/resourceclaims"


def publish(api: FakeApiServer, *nodes: str) -> None:
    api.put(
        f"{DRA}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
        },
    )
    for name in nodes:
        add_node(api, name, gpus=0)  # its GPUs are published in slices, not advertised
        for i, spec in enumerate(node_slices(name, gpu_model="H100-80GB", gpus=8)):
            api.put(
                f"{DRA}/resourceslices",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-gpu.nvidia.com-{i}"},
                    "spec": spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
                },
            )


def claim(api: FakeApiServer, name: str, count: int, allocation: dict[str, Any] | None = None) -> None:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
                ]
            }
        },
    }
    if allocation is not None:
        body["status"] = {"allocation": allocation}
    api.put(CLAIMS, body)


def claim_pod(name: str, *, made: str | None = None, shared: str | None = None, **kw: Any) -> dict:
    """A pod asking GPUs only through a claim: from a template (`made`: the claim the controller
    manager made for it) or a named, shared one."""
    obj = pod(name, gpus=None, **kw)
    if made is not None:
        obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "eight-gpus"}]
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": made}]
    else:
        obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": shared}]
    return obj


def stored(api: FakeApiServer, name: str) -> dict:
    return api.objects[CLAIMS_KEY][("team-a", name)]


def run(sched: KubeScheduler):
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs, *sched.dra.informers()):
        informer.relist()
    return sched.schedule_once()


def scheduler(api: FakeApiServer, gpus: int = 1000) -> KubeScheduler:
    add_queues(api, "default", "team-a", gpus=gpus)
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


def test_a_template_claim_is_allocated_on_the_node_the_pod_is_bound_to(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1", "dra-2")
    claim(api, "p-gpu-x7k2q", 8)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("p", made="p-gpu-x7k2q"))
    run(sched)
    node = bound(api)["p"]
    status = stored(api, "p-gpu-x7k2q")["status"]
    results = status["allocation"]["devices"]["results"]
    assert len(results) == 8 and {r["pool"] for r in results} == {node}
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"} and {r["request"] for r in results} == {
        "gpus"
    }
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == [node]
    pod_uid = api.objects["/v1/pods"][("team-a", "p")]["metadata"]["uid"]
    assert [r["uid"] for r in status["reservedFor"]] == [pod_uid]


def test_claim_gpus_count_against_the_queue_quota(api: FakeApiServer) -> None:
    sched = scheduler(api, gpus=8)
    publish(api, "dra-1", "dra-2")
    for name in ("a", "b"):
        claim(api, f"{name}-gpu", 8)
        api.put(
            "/api/v1/namespaces/team-a/pods",
            claim_pod(name, made=f"{name}-gpu", created=f"2026-11-29T11:00:0{'ab'.index(name)}Z"),
        )
    result = run(sched)
    assert list(bound(api)) == ["a"]
    assert result is not None and result.pending["team-a/b"].reason.type == "QuotaExceeded"
    assert "allocation" not in stored(api, "b-gpu").get("status", {})


def test_a_shared_claim_is_allocated_once_and_reserved_for_each_pod(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1", "dra-2")
    claim(api, "shared", 2)
    for name in ("s0", "s1"):
        api.put("/api/v1/namespaces/team-a/pods", claim_pod(name, shared="shared"))
    run(sched)
    run(sched)
    nodes = bound(api)
    assert set(nodes) == {"s0", "s1"} and nodes["s0"] == nodes["s1"]
    status = stored(api, "shared")["status"]
    assert len(status["allocation"]["devices"]["results"]) == 2
    assert len(status["reservedFor"]) == 2


def test_an_allocated_claim_is_respected(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1", "dra-2")
    allocation = {
        "devices": {
            "results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "dra-2", "device": "gpu-5"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dra-2"]}]}
            ]
        },
    }
    claim(api, "given", 1, allocation)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("p", shared="given"))
    run(sched)
    assert bound(api) == {"p": "dra-2"}
    status = stored(api, "given")["status"]
    assert status["allocation"] == allocation and len(status["reservedFor"]) == 1


def test_a_deleted_pod_releases_its_reservation_and_the_allocation(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1")
    claim(api, "p-gpu", 8)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("p", made="p-gpu"))
    run(sched)
    assert stored(api, "p-gpu")["status"]["reservedFor"]
    api.request("DELETE", "/api/v1/namespaces/team-a/pods/p", body={"gracePeriodSeconds": 0})
    # The devices are free again: a second pod gets the same node's GPUs.
    claim(api, "q-gpu", 8)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("q", made="q-gpu"))
    run(sched)
    assert stored(api, "p-gpu")["status"] == {}
    run(sched)
    assert bound(api) == {"q": "dra-1"}


def test_a_pod_whose_claim_is_not_made_yet_waits_with_the_reason(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1")
    obj = claim_pod("p", made="later")
    obj["status"].pop("resourceClaimStatuses")
    api.put("/api/v1/namespaces/team-a/pods", obj)
    run(sched)
    assert not bound(api)
    assert sched.kcache.reasons["team-a/p"].type == "ClaimsNotReady"


def test_a_refused_binding_releases_the_claims(api: FakeApiServer) -> None:
    claim(api, "gone-gpu", 1)
    gone = claim_pod("gone", made="gone-gpu")  # never created: its Binding is refused
    gone["metadata"]["uid"] = "uid-gone"
    allocation = {
        "devices": {
            "results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]
        }
    }
    binder = Binder(Actions(api), workers=0)
    binder.submit(
        gone, "team-a/gone/main/0", "n", None, claims=[ClaimWrite("team-a", "gone-gpu", allocation)]
    )
    assert [o.result for o in binder.drain()] == [BindResult.REFUSED]
    assert stored(api, "gone-gpu")["status"] == {}


def test_the_scheduler_role_reads_dra_objects_and_patches_only_claim_status() -> None:
    from gpufleet.kube.manifests import render_all

    role = next(
        o
        for o in render_all()
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "gpufleet-scheduler"
    )
    verbs = {
        (res, v)
        for r in role["rules"]
        if r["apiGroups"] == ["resource.k8s.io"]
        for res in r["resources"]
        for v in r["verbs"]
    }
    for kind in ("deviceclasses", "resourceslices", "resourceclaims"):
        assert {(kind, "list"), (kind, "watch")} <= verbs
    assert {v for res, v in verbs if res.startswith("resourceclaims/")} == {"patch"}
    assert not {v for res, v in verbs if res in ("resourceslices", "deviceclasses")} - {
        "get",
        "list",
        "watch",
    }


def test_each_gang_member_gets_its_own_claim_on_its_own_node(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1", "dra-2")
    labels = {"gpufleet.io/gang": "llm", "gpufleet.io/gang-size": "2"}
    for i in range(2):
        claim(api, f"llm-{i}-gpu-q{i}", 8)
        api.put(
            "/api/v1/namespaces/team-a/pods", claim_pod(f"llm-{i}", made=f"llm-{i}-gpu-q{i}", labels=labels)
        )
    run(sched)
    nodes = bound(api)
    assert set(nodes) == {"llm-0", "llm-1"} and set(nodes.values()) == {"dra-1", "dra-2"}
    for i in range(2):
        status = stored(api, f"llm-{i}-gpu-q{i}")["status"]
        assert {r["pool"] for r in status["allocation"]["devices"]["results"]} == {nodes[f"llm-{i}"]}
        uid = api.objects["/v1/pods"][("team-a", f"llm-{i}")]["metadata"]["uid"]
        assert [r["uid"] for r in status["reservedFor"]] == [uid]


def test_a_restarted_scheduler_keeps_bound_pods_devices_from_their_claims(api: FakeApiServer) -> None:
    first = scheduler(api)
    publish(api, "dra-1")
    claim(api, "p-gpu", 4)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("p", made="p-gpu"))
    run(first)
    assert bound(api) == {"p": "dra-1"}
    second = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    claim(api, "q-gpu", 4)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("q", made="q-gpu"))
    claim(api, "r-gpu", 1)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("r", made="r-gpu", created="2026-11-29T11:00:09Z"))
    run(second)
    assert bound(api) == {"p": "dra-1", "q": "dra-1"}  # r: the node's 8 GPUs are taken
    held = [
        {r["device"] for r in stored(api, name)["status"]["allocation"]["devices"]["results"]}
        for name in ("p-gpu", "q-gpu")
    ]
    assert len(held[0]) == len(held[1]) == 4 and not held[0] & held[1]
    assert "allocation" not in stored(api, "r-gpu").get("status", {})


def test_pods_with_claims_wait_until_dra_objects_are_listed_and_others_do_not(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1")
    add_node(api, "gpu-1")
    claim(api, "p-gpu", 8)
    api.put("/api/v1/namespaces/team-a/pods", claim_pod("p", made="p-gpu"))
    api.put("/api/v1/namespaces/team-a/pods", pod("plain", gpus=2))
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):  # DRA's not listed yet
        informer.relist()
    sched.schedule_once()
    assert bound(api) == {"plain": "gpu-1"}
    assert sched.kcache.reasons["team-a/p"].type == "ClaimsNotReady"
    for informer in sched.dra.informers():
        informer.relist()
    sched.schedule_once()
    assert bound(api) == {"plain": "gpu-1", "p": "dra-1"}


def test_gpus_asked_both_as_extended_resource_and_through_a_claim_are_refused(api: FakeApiServer) -> None:
    sched = scheduler(api)
    publish(api, "dra-1")
    claim(api, "p-gpu", 2)
    both = claim_pod("p", made="p-gpu")
    both["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    api.put("/api/v1/namespaces/team-a/pods", both)
    run(sched)
    assert not bound(api)
    reason = sched.kcache.reasons["team-a/p"]
    assert reason.type == "InvalidClaims" and "team-a/p" in reason.message
