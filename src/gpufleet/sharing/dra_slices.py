"""The ResourceSlice a node publishes for its GPUs under DRA, with the driver name and attribute names of
NVIDIA's DRA driver for GPUs (`gpu.nvidia.com`), so DeviceClasses and selectors written for that driver
select the same devices here.

A GPU in exclusive use is one device (`type: gpu`). A MIG-enabled GPU is published as partitionable
devices: the whole GPU and every MIG instance the catalogue allows at every start slot, all consuming
the GPU's counter set (one counter per memory slice, and its compute slices), so an allocation can take
the whole GPU or instances that do not overlap, never both. Unhealthy GPUs are left out: a GPU that fails
disappears from the pool's next generation, and comes back when it recovers.

As `resource.k8s.io/v1` requires (the 1.36 API server refuses anything else), a slice holds devices or
counter sets, never both: the counter sets are published in slices of their own within the node's
pool, `resourceSliceCount` counts both kinds, and empty lists are left out when serialised. Each
device carries its NVLink clique (`cliqueId`) where the node knows it, so a claim's `matchAttribute`
on `gpu.nvidia.com/cliqueId` keeps its GPUs in one clique.

The digital twin's nodes publish this from their pool's model; the node agent's `--dra` mode publishes
the same from what NVML tells it (`GpuFacts`: the real UUID, PCI bus, memory and compute capability of
each GPU, and the MIG instances that exist on a MIG-enabled one).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.api.gpu_models import canonical_name, catalogue
from gpufleet.api.numerals import plain_digits
from gpufleet.sharing import mig

DRIVER = "gpu.nvidia.com"
COUNTER_SET = "gpu-{index}-counter-set"
MAX_DEVICES = 128
"""Devices one ResourceSlice may hold (Kubernetes' limit)."""
MAX_CONSUMING_DEVICES = 64
"""Devices one ResourceSlice may hold when any of them consumes counters (v1's limit)."""
MAX_COUNTER_SETS = 8
"""Counter sets one ResourceSlice may hold (v1's limit)."""

# Architecture and compute capability by model family (the model's first letters), where known.
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("GB", "Blackwell", "10.0.0"),
    ("B", "Blackwell", "10.0.0"),
    ("GH", "Hopper", "9.0.0"),
    ("H", "Hopper", "9.0.0"),
    ("A100", "Ampere", "8.0.0"),
    ("A", "Ampere", "8.6.0"),
    ("L", "Ada Lovelace", "8.9.0"),
)


# The attribute Kubernetes' deviceattribute package defines for a device's PCI address (KEP 4381), which
# NVIDIA's driver publishes beside its own `pcieBusID`.
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"

# Architecture by CUDA compute capability (major, minor), as NVML's architecture query names it.
_ARCHITECTURES: tuple[tuple[tuple[int, int], str], ...] = (
    ((10, 0), "Blackwell"),
    ((9, 0), "Hopper"),
    ((8, 9), "Ada Lovelace"),
    ((8, 0), "Ampere"),
    ((7, 5), "Turing"),
    ((7, 0), "Volta"),
)


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG instance that exists on a GPU: published as the one partition at its placement."""

    profile: str
    start: int
    uuid: str


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What a node knows of one GPU (from NVML); where given, it replaces what the builder derives from
    the model's name. `mig_instances` None publishes every placement the catalogue allows (a GPU whose
    instances are made on demand); a tuple publishes exactly those instances."""

    uuid: str
    product_name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    pci_bus_id: str
    minor: int
    mig_instances: tuple[MigInstance, ...] | None = None


def slice_name(node_name: str, index: int) -> str:
    """The name of a node's `index`th slice, the same whoever publishes it (the twin, the node agent)."""
    return f"{node_name}-{DRIVER}-{index}"


def architecture(compute_capability: tuple[int, int]) -> str | None:
    """The GPU architecture of a compute capability (`(9, 0)` -> `Hopper`), None when unknown."""
    return next((name for cc, name in _ARCHITECTURES if compute_capability >= cc), None)


def product_name(gpu_model: str) -> str:
    """The name NVML (and NVIDIA's driver) gives a model: `H100-80GB` -> `NVIDIA H100 80GB HBM3`."""
    model = canonical_name(gpu_model)
    aliases = catalogue().get(model, ())
    return next((a for a in aliases if a.startswith("NVIDIA ")), model)


def _family(model: str) -> tuple[str, str] | None:
    return next(((arch, cc) for prefix, arch, cc in _FAMILIES if model.startswith(prefix)), None)


def node_slices(
    node_name: str,
    *,
    gpu_model: str,
    gpus: int,
    memory_gb: int | None = None,
    mig_gpus: Collection[int] = (),
    unhealthy: Collection[int] = (),
    driver_version: str = "",
    generation: int = 1,
    cliques: Mapping[int, str] | None = None,
    facts: Mapping[int, GpuFacts] | None = None,
    cuda_driver_version: str = "",
) -> list[ResourceSliceSpec]:
    """The slices of the node's pool (named after the node) at `generation`, valid for
    `resource.k8s.io/v1`: slices of devices (a GPU's devices stay in one slice, at most 128 a slice,
    64 where any consumes counters) followed by slices holding only the MIG GPUs' counter sets.
    `cliques` maps a GPU's index to its NVLink clique (`<clusterUUID>.<cliqueId>` as NVIDIA's driver
    writes it), published as the `cliqueId` attribute of the GPU and its MIG devices. `facts` gives a GPU's
    real identity and properties by index (the node agent's NVML); a GPU without them is described
    from `gpu_model`, as the twin's are."""
    model = canonical_name(gpu_model)
    if memory_gb is None:
        # the model's name states it where the catalogue names models by memory (H100-80GB)
        stated = re.search(r"(\d+)GB$", model)
        memory_gb = int(stated.group(1)) if stated else None
    base: dict[str, Any] = {"productName": {"string": product_name(model)}}
    family = _family(model)
    if family is not None:
        base["architecture"] = {"string": family[0]}
        base["cudaComputeCapability"] = {"version": family[1]}
    if driver_version:
        base["driverVersion"] = {"version": _semver(driver_version)}
    if cuda_driver_version:
        base["cudaDriverVersion"] = {"version": _semver(cuda_driver_version)}
    groups: list[list[dict[str, Any]]] = []
    counter_sets: list[dict[str, Any]] = []
    for index in range(gpus):
        if index in unhealthy:
            continue
        known = (facts or {}).get(index)
        gpu_base = base if known is None else _with_facts(base, known)
        attributes = {
            **gpu_base,
            "type": {"string": "gpu"},
            "index": {"int": index},
            "uuid": {"string": f"GPU-{node_name}-{index}" if known is None else known.uuid},
        }
        if known is not None:
            attributes["minor"] = {"int": known.minor}
            attributes["pcieBusID"] = {"string": known.pci_bus_id}
            attributes[PCI_BUS_ID_ATTRIBUTE] = {"string": known.pci_bus_id}
        clique = (cliques or {}).get(index)
        if clique:
            attributes["cliqueId"] = {"string": clique}
        device: dict[str, Any] = {"name": f"gpu-{index}", "attributes": attributes}
        if known is not None:
            device["capacity"] = {"memory": {"value": _mebibytes(known.memory_mib)}}
        elif memory_gb is not None:
            device["capacity"] = {"memory": {"value": f"{memory_gb}Gi"}}
        devices = [device]
        gpu_model_here = model if known is None else canonical_name(known.product_name)
        if index in mig_gpus and mig.mig_capable(gpu_model_here):
            counter_set = COUNTER_SET.format(index=index)
            counter_sets.append({"name": counter_set, "counters": _counters(range(mig.MEMORY_SLICES), 7)})
            device["consumesCounters"] = [
                {"counterSet": counter_set, "counters": _counters(range(mig.MEMORY_SLICES), 7)}
            ]
            parent = {**gpu_base, **({"cliqueId": {"string": clique}} if clique else {})}
            if known is not None:
                parent["parentUUID"] = {"string": known.uuid}
            devices.extend(_mig_devices(node_name, gpu_model_here, index, parent, counter_set, known))
        groups.append(devices)
    packed: list[list[dict[str, Any]]] = [[]]
    for devices in groups:
        if packed[-1] and len(packed[-1]) + len(devices) > _device_limit(packed[-1] + devices):
            packed.append([])
        packed[-1].extend(devices)
    # v1: a slice publishes devices or counter sets, never both; the counter sets go in slices of
    # their own in the same pool (at most 8 a slice), where the devices' consumesCounters find them.
    counter_slices = [
        counter_sets[i : i + MAX_COUNTER_SETS] for i in range(0, len(counter_sets), MAX_COUNTER_SETS)
    ]
    pool = {
        "name": node_name,
        "generation": generation,
        "resourceSliceCount": len(packed) + len(counter_slices),
    }
    common = {"driver": DRIVER, "nodeName": node_name, "pool": pool}
    return [ResourceSliceSpec.model_validate({**common, "devices": d}) for d in packed] + [
        ResourceSliceSpec.model_validate({**common, "sharedCounters": c}) for c in counter_slices
    ]


def _device_limit(devices: list[dict[str, Any]]) -> int:
    """How many devices a slice holding these may have: fewer when any consumes counters (v1)."""
    return MAX_CONSUMING_DEVICES if any(d.get("consumesCounters") for d in devices) else MAX_DEVICES


def _mig_devices(
    node_name: str,
    model: str,
    index: int,
    base: dict[str, Any],
    counter_set: str,
    known: GpuFacts | None = None,
) -> list[dict[str, Any]]:
    """The GPU's MIG partitions: every placement of every profile, or, where the GPU's facts list the
    instances that exist, those (with their UUIDs)."""
    catalogue = mig.catalogue(model)
    placements: list[tuple[mig.MigProfile, int, str | None]]
    if known is None or known.mig_instances is None:
        placements = [(p, start, None) for p in catalogue.values() for start in p.starts]
    else:
        placements = [(mig.profile(model, i.profile), i.start, i.uuid) for i in known.mig_instances]
    devices: list[dict[str, Any]] = []
    for profile, start, uuid in placements:
        slices = range(start, start + profile.memory_slices)
        devices.append(
            {
                "name": f"gpu-{index}-mig-{profile.gi_profile_id}-{start}-{profile.memory_slices}",
                "attributes": {
                    **base,
                    "type": {"string": "mig"},
                    "profile": {"string": profile.name},
                    "parentIndex": {"int": index},
                    **(
                        {}
                        if uuid is None and known is not None
                        # a placement of a real GPU (dynamic MIG) has no UUID until prepare makes it
                        else {
                            "uuid": {
                                "string": uuid or f"MIG-{node_name}-{index}-{profile.gi_profile_id}-{start}"
                            }
                        }
                    ),
                },
                "capacity": {"memory": {"value": f"{profile.memory_gb}Gi"}},
                "consumesCounters": [
                    {"counterSet": counter_set, "counters": _counters(slices, profile.compute_slices)}
                ],
            }
        )
    return devices


def _with_facts(base: dict[str, Any], known: GpuFacts) -> dict[str, Any]:
    """The shared attributes with what NVML says of this GPU in place of what its model implies."""
    out = {**base, "productName": {"string": known.product_name}}
    arch = architecture(known.compute_capability)
    if arch is not None:
        out["architecture"] = {"string": arch}
    major, minor = known.compute_capability
    out["cudaComputeCapability"] = {"version": f"{major}.{minor}.0"}
    return out


def _counters(memory_slices: range, compute_slices: int) -> dict[str, dict[str, str]]:
    # v1 wants counter names to be DNS labels (lowercase, digits, '-'): the API server refuses
    # `memorySlice0`.
    counters = {f"memory-slice-{k}": {"value": "1"} for k in memory_slices}
    counters["compute-slices"] = {"value": str(compute_slices)}
    return counters


def _mebibytes(mib: int) -> str:
    """MiB as the API server writes the quantity back (its canonical form: the largest binary suffix
    that keeps the number whole, `81920Mi` -> `80Gi`), so a publisher comparing what it wants with what
    is stored sees no change where there is none."""
    for suffix in ("Ti", "Gi"):
        scale = 1024 ** (2 if suffix == "Ti" else 1)
        if mib % scale == 0 and mib:
            return f"{mib // scale}{suffix}"
    return f"{mib}Mi"


def _semver(version: str) -> str:
    """A driver version as a semver: `550.54.15` stays, `550.54` gets `.0`, and `535.161.08` is
    `535.161.8` (semver refuses leading zeros, and so does the API server's version attribute)."""
    parts = [str(int(p)) for p in version.split(".") if plain_digits(p)][:3]
    return ".".join(parts + ["0"] * (3 - len(parts)))
