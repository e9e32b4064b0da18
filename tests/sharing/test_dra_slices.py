"""The slices a node publishes under DRA: NVIDIA's driver and attribute names, healthy GPUs only, and MIG
instances as partitionable devices whose shared counters keep partitions of one GPU from overlapping."""

from __future__ import annotations

import re

import pytest

from gpufleet.api.dra_claims import DeviceConstraint, ResourceClaimSpec
from gpufleet.api.dra_devices import DeviceClassSpec, ResourceSliceSpec
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


def v1_problems(specs: list[ResourceSliceSpec]) -> list[str]:
    """What `resource.k8s.io/v1` (Kubernetes 1.36) refuses in a pool's slices, as its validation does:
    devices and sharedCounters never both in a slice, at most 128 devices (64 when any consumes
    counters), at most 8 counter sets of at most 32 counters, counter set and device names unique in
    the pool, every consumed counter set published by a slice of the pool, counter names DNS labels,
    resourceSliceCount the number of slices, and no empty list in what is sent (the server takes an
    empty list for a set field)."""
    problems: list[str] = []
    sent = [s.to_dict() for s in specs]
    pools = {(s["pool"]["name"], s["pool"]["generation"], s["pool"]["resourceSliceCount"]) for s in sent}
    if pools != {(specs[0].pool.name, specs[0].pool.generation, len(specs))}:
        problems.append(f"pool {pools}: resourceSliceCount must be {len(specs)}")
    counter_sets: dict[str, set[str]] = {}
    names: list[str] = []
    for i, (spec, body) in enumerate(zip(specs, sent, strict=True)):
        if "devices" in body and "sharedCounters" in body:
            problems.append(f"slice {i}: both devices and sharedCounters")
        consuming = any(d.consumes_counters for d in spec.devices)
        if len(spec.devices) > (64 if consuming else 128):
            problems.append(f"slice {i}: {len(spec.devices)} devices")
        if len(spec.shared_counters) > 8 or any(len(c.counters) > 32 for c in spec.shared_counters):
            problems.append(f"slice {i}: too many counter sets or counters")
        for counter_set in spec.shared_counters:
            if counter_set.name in counter_sets:
                problems.append(f"counter set {counter_set.name} twice in the pool")
            counter_sets[counter_set.name] = set(counter_set.counters)
            problems += [f"counter {n}: not a DNS label" for n in counter_set.counters if not _label(n)]
        names += [d.name for d in spec.devices]
        problems += [f"slice {i}: empty list at {path}" for path in _empty_lists(body)]
    if len(names) != len(set(names)):
        problems.append("a device name twice in the pool")
    for spec in specs:
        for device in spec.devices:
            for consumed in device.consumes_counters:
                known = counter_sets.get(consumed.counter_set)
                if known is None or not set(consumed.counters) <= known:
                    problems.append(f"{device.name}: counter set {consumed.counter_set} not in the pool")
    return problems


def _label(name: str) -> bool:
    return re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name) is not None


def _empty_lists(value: object, path: str = "spec") -> list[str]:
    if value == []:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _empty_lists(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _empty_lists(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize(
    ("gpus", "mig_gpus", "device_slices", "counter_slices"),
    [(8, (), 1, 0), (8, (2,), 1, 1), (8, range(8), 4, 1), (16, range(16), 8, 2)],
)
def test_dra_slices_are_valid_for_the_v1_api(
    gpus: int, mig_gpus: range, device_slices: int, counter_slices: int
) -> None:
    specs = node_slices("n1", gpu_model="A100-40GB", gpus=gpus, memory_gb=40, mig_gpus=mig_gpus)
    assert v1_problems(specs) == []
    with_devices = [s for s in specs if s.devices]
    with_counters = [s for s in specs if s.shared_counters]
    assert (len(with_devices), len(with_counters), len(specs)) == (
        device_slices,
        counter_slices,
        device_slices + counter_slices,
    )
    # what a 1.34 driver would have sent (counters beside devices) is what the check refuses
    both = specs[0].model_copy(
        update={"shared_counters": [c for s in with_counters for c in s.shared_counters]}
    )
    assert not mig_gpus or any("both" in p for p in v1_problems([both, *specs[1:]]))


def test_dra_counters_published_apart_still_bound_mig_partitions() -> None:
    specs = node_slices("n1", gpu_model="H100-80GB", gpus=2, memory_gb=80, mig_gpus=[1])
    assert [bool(s.devices) for s in specs] == [True, False]  # the counters are in a slice of their own
    node = node_devices(specs, node_name="n1", labels={})
    seven_g = 'device.attributes["gpu.nvidia.com"].profile == "7g.80gb"'
    first = allocate_claims([claim("a", "mig", seven_g)], node_name="n1", node=node, classes=CLASSES)
    assert not isinstance(first, DraUnsatisfied)
    held = [(d.driver, d.pool, d.device) for d in first[0].devices]
    one_g = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    again = allocate_claims(
        [claim("b", "mig", one_g)], node_name="n1", node=node, classes=CLASSES, in_use=held
    )
    assert isinstance(again, DraUnsatisfied) and again.rejected.get("shared counters")


def test_dra_slices_publish_the_nvlink_clique_for_match_attribute() -> None:
    cliques = {i: f"cluster.{i // 4}" for i in range(8)}
    specs = node_slices("n1", gpu_model="H100-80GB", gpus=8, cliques=cliques, mig_gpus=[7])
    by_name = {d.name: d for s in specs for d in s.devices}
    assert by_name["gpu-5"].attributes["cliqueId"].value == "cluster.1"
    assert all(
        d.attributes["cliqueId"].value == "cluster.1" for n, d in by_name.items() if n.startswith("gpu-7")
    )
    node = node_devices(specs, node_name="n1", labels={})
    four = claim("c", "gpu", count=4)
    four.spec.devices.constraints.append(DeviceConstraint(match_attribute="gpu.nvidia.com/cliqueId"))
    held = [(DRIVER, "n1", "gpu-0")]  # clique 0 has three GPUs left: the four come from clique 1
    answer = allocate_claims([four], node_name="n1", node=node, classes=CLASSES, in_use=held)
    assert not isinstance(answer, DraUnsatisfied)
    assert [d.device for d in answer[0].devices] == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
