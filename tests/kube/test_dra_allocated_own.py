"""A pod's own claim (made from a template) that is allocated already when gpufleet places its pod set
(a previous run wrote it before the Binding, or another scheduler did), in a pod set of several pods:
respected, never re-allocated, the pod pinned to its node, its devices kept from the other pods."""

from __future__ import annotations

from typing import Any

from .fakeapi import FakeApiServer
from .test_dra_scheduler import CLAIMS, claim, claim_pod, publish, run, scheduler, stored
from .test_scheduler import bound

PODS = "/api/v1/namespaces/team-a/pods"
GANG = {"gpufleet.io/gang": "llm", "gpufleet.io/gang-size": "2"}


def allocated(node: str, devices: list[str]) -> dict[str, Any]:
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices]
    return {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def devices_of(api: FakeApiServer, name: str) -> set[str]:
    return {r["device"] for r in stored(api, name)["status"]["allocation"]["devices"]["results"]}


def test_a_gang_members_allocated_claim_is_kept_and_its_devices_are_not_given_to_the_other(
    api: FakeApiServer,
) -> None:
    sched = scheduler(api)
    publish(api, "dra-1", "dra-2")
    # The second member's claim holds GPUs 0-3 of dra-2 already; the first member's is not allocated.
    # Placed first, the first member would get those very GPUs (the allocator goes in device order)
    # if they were not kept for the second.
    given = allocated("dra-2", [f"gpu-{i}" for i in range(4)])
    claim(api, "llm-0-gpu-a", 4)
    claim(api, "llm-1-gpu-b", 4, given)
    for i, made in enumerate(("llm-0-gpu-a", "llm-1-gpu-b")):
        api.put("/api/v1/namespaces/team-a/pods", claim_pod(f"llm-{i}", made=made, labels=GANG))
    run(sched)
    nodes = bound(api)
    assert nodes.get("llm-1") == "dra-2" and "llm-0" in nodes
    status = stored(api, "llm-1-gpu-b")["status"]
    assert status["allocation"] == given  # never re-allocated
    uid = api.objects["/v1/pods"][("team-a", "llm-1")]["metadata"]["uid"]
    assert [r["uid"] for r in status["reservedFor"]] == [uid]
    if nodes["llm-0"] == "dra-2":
        assert not devices_of(api, "llm-0-gpu-a") & devices_of(api, "llm-1-gpu-b")


def test_an_allocated_claim_pins_its_pod_even_when_its_devices_are_the_only_ones_free(
    api: FakeApiServer,
) -> None:
    sched = scheduler(api)
    publish(api, "dra-1")
    # One node of 8 GPUs: the second member's claim holds GPUs 0-3. The first member must get 4-7.
    given = allocated("dra-1", [f"gpu-{i}" for i in range(4)])
    claim(api, "llm-0-gpu-a", 4)
    claim(api, "llm-1-gpu-b", 4, given)
    for i, made in enumerate(("llm-0-gpu-a", "llm-1-gpu-b")):
        api.put("/api/v1/namespaces/team-a/pods", claim_pod(f"llm-{i}", made=made, labels=GANG))
    run(sched)
    assert bound(api) == {"llm-0": "dra-1", "llm-1": "dra-1"}
    assert stored(api, "llm-1-gpu-b")["status"]["allocation"] == given
    assert devices_of(api, "llm-0-gpu-a") == {f"gpu-{i}" for i in range(4, 8)}


def test_an_allocated_claim_on_a_node_that_cannot_take_its_pod_keeps_the_gang_pending(
    api: FakeApiServer,
) -> None:
    sched = scheduler(api)
    publish(api, "dra-1", "dra-2")
    # The claim names dra-3, which does not exist here: the pod may go nowhere else, nor its gang.
    claim(api, "llm-0-gpu-a", 4)
    claim(api, "llm-1-gpu-b", 4, allocated("dra-3", [f"gpu-{i}" for i in range(4)]))
    for i, made in enumerate(("llm-0-gpu-a", "llm-1-gpu-b")):
        api.put("/api/v1/namespaces/team-a/pods", claim_pod(f"llm-{i}", made=made, labels=GANG))
    result = run(sched)
    assert bound(api) == {}
    assert result is not None and any(p.reason.type == "NoFit" for p in result.pending.values())
    assert "allocation" not in stored(api, "llm-0-gpu-a").get("status", {})
    assert stored(api, "llm-1-gpu-b")["status"]["allocation"]["devices"]["results"][0]["pool"] == "dra-3"


def test_devices_of_a_claim_allocated_for_a_pod_not_placed_here_are_not_given_to_another(
    api: FakeApiServer,
) -> None:
    sched = scheduler(api)
    publish(api, "dra-1")
    # Another scheduler allocated GPUs 0-3 of dra-1 to its pod's claim and has not bound the pod yet.
    claim(api, "theirs-gpu", 4, allocated("dra-1", [f"gpu-{i}" for i in range(4)]))
    claim(api, "p-gpu", 4)
    claim(api, "q-gpu", 4)
    api.put(PODS, claim_pod("p", made="p-gpu", created="2026-11-29T11:00:01Z"))
    api.put(PODS, claim_pod("q", made="q-gpu", created="2026-11-29T11:00:02Z"))
    run(sched)
    run(sched)
    assert bound(api) == {"p": "dra-1"}, "4 GPUs are free, 4 are the other claim's"
    assert devices_of(api, "p-gpu") == {f"gpu-{i}" for i in range(4, 8)}
    assert "allocation" not in stored(api, "q-gpu").get("status", {})
    # The other claim deallocated: its devices are free again for the waiting pod.
    patch = {"status": {"allocation": None}}
    api.request(
        "PATCH", f"{CLAIMS}/theirs-gpu/status", body=patch, content_type="application/merge-patch+json"
    )
    run(sched)
    run(sched)
    assert bound(api) == {"p": "dra-1", "q": "dra-1"}
    assert devices_of(api, "q-gpu") == {f"gpu-{i}" for i in range(4)}
