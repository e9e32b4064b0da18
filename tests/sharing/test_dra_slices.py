"""The slices a node publishes under DRA: NVIDIA's driver and attribute names, healthy GPUs only, and MIG
instances as partitionable devices whose shared counters keep partitions of one GPU from overlapping."""

from __future__ import annotations

from gpufleet.api.dra_claims import ResourceClaimSpec
from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.api.gpu_models import canonical_name
from gpufleet.fleet.devices import node_devices
from gpufleet.scheduler.placement.dra import DraUnsatisfied, PodClaim, allocate_claims, claim_demand
from gpufleet.sharing.dra_slices import DRIVER, MAX_DEVICES, node_slices

CLASSES = {
    kind: DeviceClassSpec.model_validate(
        {"selectors": [{"cel": {"expression": f'device.attributes["gpu.nvidia.com"].type == "{kind}"'}}]}
    )
    for kind in ("gpu", "mig")
}


def claim(name: str, kind: str, *selectors: str, count: int = 1) -> PodClaim:
    exactly = {
        "deviceClassName": kind,
        "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }
    spec = ResourceClaimSpec.model_validate({"devices": {"requests": [{"name": "r", "exactly": exactly}]}})
    return PodClaim(key=f"ns/{name}", namespace="ns", spec=spec)


def test_dra_slice_publishes_healthy_gpus_with_nvidia_attribute_names() -> None:
    (spec,) = node_slices(
        "n1", gpu_model="H100", gpus=8, memory_gb=80, unhealthy=[3], driver_version="550.54.15"
    )
    assert spec.driver == DRIVER and spec.node_name == "n1" and spec.pool.name == "n1"
    names = [d.name for d in spec.devices]
    assert names == [f"gpu-{i}" for i in range(8) if i != 3]
    attributes = spec.devices[0].attributes
    assert attributes["productName"].value == "NVIDIA H100 80GB HBM3"
    assert attributes["architecture"].value == "Hopper"
    assert attributes["driverVersion"].value == "550.54.15"
    assert attributes["index"].value == 0 and attributes["type"].value == "gpu"
    node = node_devices([spec], node_name="n1", labels={})
    demand = claim_demand(
        [claim("c", "gpu", count=4)], classes=CLASSES, devices=node.devices(), model_of=canonical_name
    )
    assert (demand.gpus, demand.gpu_models) == (4, ("H100-80GB",))


def test_dra_mig_partitions_of_one_gpu_share_its_counters() -> None:
    node = node_devices(
        node_slices("n1", gpu_model="H100-80GB", gpus=1, memory_gb=80, mig_gpus=[0]),
        node_name="n1",
        labels={},
    )
    three_g = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    held: list[tuple[str, str, str]] = []
    for name in ("a", "b"):  # two pods, each one 3g.40gb of the same GPU
        answer = allocate_claims(
            [claim(name, "mig", three_g)], node_name="n1", node=node, classes=CLASSES, in_use=held
        )
        assert not isinstance(answer, DraUnsatisfied)
        held += [(d.driver, d.pool, d.device) for d in answer[0].devices]
    assert len(set(held)) == 2
    four_g = 'device.attributes["gpu.nvidia.com"].profile == "4g.40gb"'
    third = allocate_claims(
        [claim("c", "mig", four_g)], node_name="n1", node=node, classes=CLASSES, in_use=held
    )
    assert isinstance(third, DraUnsatisfied) and third.rejected.get("shared counters")
    whole = allocate_claims([claim("w", "gpu")], node_name="n1", node=node, classes=CLASSES, in_use=held)
    assert isinstance(whole, DraUnsatisfied)  # the GPU is partitioned: the whole device cannot be had


def test_dra_slices_of_a_fully_partitionable_node_stay_within_the_device_limit() -> None:
    specs = node_slices("n1", gpu_model="A100-40GB", gpus=8, memory_gb=40, mig_gpus=range(8))
    assert len(specs) > 1 and all(len(s.devices) <= MAX_DEVICES for s in specs)
    assert {s.pool.resource_slice_count for s in specs} == {len(specs)}
    node = node_devices(specs, node_name="n1", labels={})
    (pool,) = node.pools
    assert pool.complete and pool.valid
    assert len(node.counters()) == 8 * 9  # per GPU: 8 memory slices and its compute slices
    assert sum(1 for d in node.devices() if d.device.attributes["type"].value == "mig") == 8 * 25
