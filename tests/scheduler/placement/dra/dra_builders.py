"""Builders for DRA allocation tests: slices of GPUs (and MIG partitions with shared counters), classes
and claims, written as compactly as the cases need."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.api.dra_claims import ResourceClaimSpec
from gpufleet.api.dra_devices import DeviceClassSpec, ResourceSliceSpec
from gpufleet.fleet.devices import NodeDevices, node_devices
from gpufleet.scheduler.placement.dra import PodClaim

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"

CLASSES: dict[str, DeviceClassSpec] = {
    GPU_CLASS: DeviceClassSpec.model_validate(
        {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER}" && '
                        'device.attributes["gpu.nvidia.com"].type == "gpu"'
                    }
                }
            ],
            "config": [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}}],
        }
    ),
    MIG_CLASS: DeviceClassSpec.model_validate(
        {"selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].type == "mig"'}}]}
    ),
}


def gpu(
    name: str,
    *,
    product: str = "H100",
    memory: str = "80Gi",
    clique: str | None = None,
    counters: Mapping[str, str] | None = None,
    counter_set: str | None = None,
    kind: str = "gpu",
) -> dict[str, Any]:
    """A device as a slice lists it: a whole GPU, or (kind="mig") a partition consuming `counters`."""
    attributes: dict[str, Any] = {"type": {"string": kind}, "productName": {"string": product}}
    if clique is not None:
        attributes["gpu.nvidia.com/cliqueId"] = {"string": clique}
    device: dict[str, Any] = {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }
    if counters:
        device["consumesCounters"] = [
            {"counterSet": counter_set or "gpu-0", "counters": {k: {"value": v} for k, v in counters.items()}}
        ]
    return device


def slice_spec(
    node: str,
    devices: Sequence[dict[str, Any]],
    *,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    counter_sets: Mapping[str, Mapping[str, str]] | None = None,
) -> ResourceSliceSpec:
    return ResourceSliceSpec.model_validate(
        {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
            "devices": list(devices),
            "sharedCounters": [
                {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}
                for name, counters in (counter_sets or {}).items()
            ],
        }
    )


def node_of(*slices: ResourceSliceSpec, name: str = "n1") -> NodeDevices:
    return node_devices(slices, node_name=name, labels={})


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: Sequence[dict[str, Any]] = (),
    namespace: str = "team-a",
) -> PodClaim:
    spec = ResourceClaimSpec.model_validate(
        {"devices": {"requests": list(requests), "constraints": list(constraints)}}
    )
    return PodClaim(key=f"{namespace}/{name}", namespace=namespace, spec=spec)


def request(
    name: str = "gpus",
    *,
    device_class: str = GPU_CLASS,
    count: int | None = None,
    mode: str | None = None,
    selectors: Sequence[str] = (),
    admin: bool | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin is not None:
        exactly["adminAccess"] = admin
    return {"name": name, "exactly": exactly}


def gpus(node: str, n: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [gpu(f"gpu-{i}", **kwargs) for i in range(n)]
