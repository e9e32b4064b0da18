"""The node agent's ResourceSlices from a recorded (fake) NVML: NVIDIA's attribute names with the real
facts of each GPU, the MIG instances that exist as partitionable devices of their GPU's counters, and
unhealthy devices left out until they recover."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.agent.config import AgentConfig
from gpufleet.agent.deviceplugin.resources import build_resources
from gpufleet.agent.dra.slices import node_slice_specs
from gpufleet.agent.health import HealthState
from gpufleet.agent.labels import gfd_labels
from gpufleet.agent.nvml import RealNvml, RecordedNvml
from gpufleet.api.dra_claims import ResourceClaimSpec
from gpufleet.api.dra_devices import Device, DeviceClassSpec, ResourceSliceSpec
from gpufleet.fleet.devices import node_devices
from gpufleet.scheduler.placement.dra import DraUnsatisfied, PodClaim, allocate_claims
from gpufleet.sharing.dra_slices import DRIVER, PCI_BUS_ID_ATTRIBUTE

from .fakes import FakePynvml

NODE = "a100-mig-0"
CLASSES = {
    kind: DeviceClassSpec.model_validate(
        {"selectors": [{"cel": {"expression": f'device.attributes["gpu.nvidia.com"].type == "{kind}"'}}]}
    )
    for kind in ("gpu", "mig")
}


def devices(specs: list[ResourceSliceSpec]) -> dict[str, Device]:
    return {d.name: d for s in specs for d in s.devices}


def claim(name: str, kind: str, expression: str = "true") -> PodClaim:
    exactly = {"deviceClassName": kind, "count": 1, "selectors": [{"cel": {"expression": expression}}]}
    spec = ResourceClaimSpec.model_validate({"devices": {"requests": [{"name": "r", "exactly": exactly}]}})
    return PodClaim(key=f"ns/{name}", namespace="ns", spec=spec)


def test_dra_agent_slices_carry_nvml_facts_under_nvidia_attribute_names(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    specs = node_slice_specs(node, NODE)
    assert {s.driver for s in specs} == {DRIVER} and {s.node_name for s in specs} == {NODE}
    assert {s.pool.resource_slice_count for s in specs} == {len(specs)}
    assert all(not (s.devices and s.shared_counters) for s in specs)  # v1: one or the other
    found = devices(specs)
    gpu = node.gpus[0]
    attributes = {k: v.value for k, v in found["gpu-0"].attributes.items()}
    assert attributes == {
        "type": "gpu",
        "index": 0,
        "minor": 0,
        "uuid": gpu.uuid,
        "productName": "NVIDIA A100-SXM4-80GB",
        "architecture": "Ampere",
        "cudaComputeCapability": "8.0.0",
        "driverVersion": "535.161.8",  # NVML's 535.161.08 as semver 2.0 allows it
        "cudaDriverVersion": "12.2.0",
        "pcieBusID": "0000:07:00.0",
        PCI_BUS_ID_ATTRIBUTE: "0000:07:00.0",
        "cliqueId": f"{NODE}.0",  # one NVSwitch board: one clique
    }
    # NVML's total (81920 MiB), in the API server's canonical form
    assert str(found["gpu-0"].capacity["memory"].value) == "80Gi"
    # the MIG instances that exist (not every placement), with their real UUIDs and their parent's
    migs = {n: d for n, d in found.items() if d.attributes["type"].value == "mig"}
    assert len(migs) == sum(len(g.mig_devices) for g in node.gpus)
    three_g = migs["gpu-0-mig-9-4-4"].attributes
    assert three_g["uuid"].value == gpu.mig_devices[0].uuid
    assert three_g["parentUUID"].value == gpu.uuid and three_g["profile"].value == "3g.40gb"


def test_dra_agent_mig_instances_share_their_gpus_counters(a100_mig: RecordedNvml) -> None:
    specs = node_slice_specs(a100_mig.discover(), NODE)
    view = node_devices(specs, node_name=NODE, labels={})
    (pool,) = view.pools
    assert pool.complete and pool.valid
    three_g = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    held: list[tuple[str, str, str]] = []
    for name in "abcdefgh":  # GPUs 0-3 have one 3g.40gb each, 6 and 7 two, 4 and 5 none
        answer = allocate_claims(
            [claim(name, "mig", three_g)], node_name=NODE, node=view, classes=CLASSES, in_use=held
        )
        assert not isinstance(answer, DraUnsatisfied), answer
        held += [(d.driver, d.pool, d.device) for d in answer[0].devices]
    assert sorted(d for _, _, d in held) == [
        *(f"gpu-{i}-mig-9-4-4" for i in range(4)),
        "gpu-6-mig-9-0-4",
        "gpu-6-mig-9-4-4",
        "gpu-7-mig-9-0-4",
        "gpu-7-mig-9-4-4",
    ]
    more = allocate_claims(
        [claim("i", "mig", three_g)], node_name=NODE, node=view, classes=CLASSES, in_use=held
    )
    assert isinstance(more, DraUnsatisfied)
    # a whole GPU whose instances are held cannot be had: its counters are spent
    whole = 'device.attributes["gpu.nvidia.com"].index == 6'
    assert isinstance(
        allocate_claims([claim("w", "gpu", whole)], node_name=NODE, node=view, classes=CLASSES, in_use=held),
        DraUnsatisfied,
    )


def test_dra_agent_slices_leave_out_unhealthy_devices_until_they_recover(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    health = HealthState()
    health.mark_unhealthy(node.gpus[1].uuid, "XID 79")
    health.mark_unhealthy(node.gpus[4].mig_devices[2].uuid, "XID 94 on GI 3")
    found = devices(node_slice_specs(node, NODE, health))
    assert not [n for n in found if n == "gpu-1" or n.startswith("gpu-1-")]  # the GPU and its instances
    assert "gpu-4-mig-19-2-1" not in found and "gpu-4-mig-19-1-1" in found and "gpu-4" in found
    health.mark_healthy(node.gpus[1].uuid)
    assert "gpu-1" in devices(node_slice_specs(node, NODE, health))


def test_dra_agent_slices_of_gpus_without_nvlink_are_cliques_of_their_own() -> None:
    node = RecordedNvml.from_profile("pcie-l4").discover()
    found = devices(node_slice_specs(node, "l4-0"))
    assert [found[f"gpu-{i}"].attributes["cliqueId"].value for i in range(4)] == [
        f"l4-0.{i}" for i in range(4)
    ]
    assert found["gpu-0"].attributes["architecture"].value == "Ada Lovelace"
    assert str(found["gpu-0"].capacity["memory"].value) == "23034Mi"  # NVML's, not the model's 24GB
    assert not any(d.consumes_counters for d in found.values())


def test_dra_agent_slices_and_labels_carry_nvmls_fabric_clique(a100_mig: RecordedNvml) -> None:
    """On a rack-scale NVLink fabric (GB200 NVL72) NVML reports each GPU's clique; it is the GPUs'
    `cliqueId` and, as GPU Feature Discovery labels it, the node's nvidia.com/gpu.clique."""
    clique = "7d3f1a52-9c0b-4e51-8f1e-2a6b5c4d3e21.4"
    recorded = a100_mig.discover()
    fabric = replace(recorded, gpus=tuple(replace(g, fabric_clique=clique) for g in recorded.gpus))
    node = RealNvml(FakePynvml(fabric)).discover()  # through pynvml's fabric-info query
    assert {g.fabric_clique for g in node.gpus} == {clique}
    found = devices(node_slice_specs(node, NODE))
    assert {d.attributes["cliqueId"].value for d in found.values()} == {clique}
    config = AgentConfig()
    assert gfd_labels(node, config, build_resources(node, config))["nvidia.com/gpu.clique"] == clique
    # no fabric: no label, and the cliques are the node's own NVLink domains
    assert "nvidia.com/gpu.clique" not in gfd_labels(recorded, config, build_resources(recorded, config))
    half = replace(recorded, gpus=(replace(recorded.gpus[0], fabric_clique=clique), *recorded.gpus[1:]))
    assert "nvidia.com/gpu.clique" not in gfd_labels(half, config, build_resources(half, config))
