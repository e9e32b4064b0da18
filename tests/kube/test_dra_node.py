"""The node agent's DRA side against an in-memory API server: its node's slices written at a new pool
generation only when they change, stale ones deleted, owned by the Node; claims read by name."""

from __future__ import annotations

from gpufleet.agent.dra.slices import node_slice_specs
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import RecordedNvml
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.kube.dra_node import claim_reader, publish, withdraw

from .fakeapi import FakeApiServer

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODE = "a100-mig-0"


def test_dra_node_slices_are_published_per_generation_and_owned_by_the_node() -> None:
    api = FakeApiServer()
    node_uid = api.put("/api/v1/nodes", {"metadata": {"name": NODE}})["metadata"]["uid"]
    api.put(SLICES, {"metadata": {"name": "other"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "n2",
            "pool": {"name": "n2", "generation": 1, "resourceSliceCount": 1}}})  # fmt: skip
    info = RecordedNvml.from_profile("a100-80gb-mig").discover()
    health = HealthState()

    def wanted(generation: int) -> list[ResourceSliceSpec]:
        return node_slice_specs(info, NODE, health, generation=generation)

    assert publish(api, NODE, wanted)
    ours = [s for s in api.get(SLICES)["items"] if s["spec"]["nodeName"] == NODE]
    assert [s["metadata"]["name"] for s in ours] == [f"{NODE}-gpu.nvidia.com-{i}" for i in range(len(ours))]
    assert {s["spec"]["pool"]["generation"] for s in ours} == {1}
    assert all(s["metadata"]["ownerReferences"][0]["uid"] == node_uid for s in ours)
    writes = len(api.requests)
    assert not publish(api, NODE, wanted)  # nothing changed: nothing written
    assert [m for m, _ in api.requests[writes:]] == ["GET"]

    health.mark_unhealthy(info.gpus[0].uuid, "XID 79")
    assert publish(api, NODE, wanted)
    ours = [s for s in api.get(SLICES)["items"] if s["spec"]["nodeName"] == NODE]
    assert {s["spec"]["pool"]["generation"] for s in ours} == {2}
    names = {d["name"] for s in ours for d in s["spec"].get("devices", [])}
    assert "gpu-0" not in names and "gpu-1" in names

    withdraw(api, NODE)
    assert [s["metadata"]["name"] for s in api.get(SLICES)["items"]] == ["other"]


def test_dra_node_claims_are_read_by_namespace_and_name() -> None:
    api = FakeApiServer()
    api.put("/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    api.put(
        "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims",
        {"metadata": {"name": "c"}, "spec": {"devices": {"requests": []}}},
    )
    read = claim_reader(api)
    claim = read("team-a", "c")
    assert claim is not None and claim.metadata.uid and claim.status.allocation is None
    assert read("team-a", "missing") is None
