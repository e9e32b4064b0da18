"""MIG instances of a node whose GPUs are partitioned by its DRA claims (dynamic MIG), in the fleet's arrays.

Such a node (it publishes its GPUs as partitionable devices and has no fixed MIG layout: a Kubernetes
node of NVIDIA's DRA driver, a twin node of a `dra` pool with MIG) starts with whole GPUs. A pod whose
claim was allocated a MIG device creates that instance here, on the device's parent GPU at the device's
memory slices (its `consumesCounters`), so the device and the fleet name the same GPU and slices; the
GPU leaves whole-GPU use (`gpu_free` 0) while any instance is on it, and comes back whole when the last
one goes. The first instance is refused on a GPU held whole or shared, and an instance overlapping
another, so nothing is ever held twice even if the claim allocator erred.

Also here: the MIG instance and slot types, and the invariant checks of MIG rows, out of `state.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.api.numerals import plain_digits
from gpufleet.fleet.devices import DeviceId, NodeDevices, PoolDevice
from gpufleet.fleet.request import GPU_MILLI
from gpufleet.sharing import mig

if TYPE_CHECKING:  # state.py imports this module
    from gpufleet.fleet.state import FleetState

_DOMAIN = "gpu.nvidia.com"
_MEMORY_SLICE = "memory-slice-"


@dataclass(frozen=True, slots=True)
class MigSlot:
    """One MIG instance: the GPU, the profile and the memory slice it starts at."""

    gpu: int
    profile: str
    start: int


@dataclass(slots=True)
class MigInstance:
    profile: str
    start: int
    holder: str | None = None
    size: int = 0
    """Memory slices (dynamic instances only: a fixed layout's are placed by the catalogue)."""


def _attribute(device: PoolDevice, name: str) -> object:
    """An attribute's value, named without or with the driver's domain, as NVIDIA's driver publishes it."""
    attrs = device.device.attributes
    found = attrs.get(name) or attrs.get(f"{_DOMAIN}/{name}")
    if found is None:
        return None
    return found.int_ if found.int_ is not None else found.string


def placement(node: NodeDevices | None, devices: Sequence[DeviceId]) -> tuple[int, int, int] | None:
    """(parent GPU, first memory slice, memory slices) of the MIG device among `devices`."""
    if node is None:
        return None
    by_id = {d.id: d for d in node.devices()}
    for device_id in devices:
        found = by_id.get(device_id)
        if found is None or _attribute(found, "type") != "mig":
            continue
        parent = _attribute(found, "parentIndex")
        slices = sorted(
            int(name.removeprefix(_MEMORY_SLICE))
            for consumed in found.device.consumes_counters
            for name in consumed.counters
            if name.startswith(_MEMORY_SLICE) and plain_digits(name.removeprefix(_MEMORY_SLICE))
        )
        if isinstance(parent, int) and slices:
            return parent, slices[0], len(slices)
    return None


def create(
    state: FleetState,
    pod: str,
    row: int,
    profile: str,
    devices: Sequence[DeviceId],
    slot: MigSlot | None = None,
) -> MigSlot | None:
    """Records the MIG instance of the pod's MIG device on its parent GPU; AllocationError (nothing
    changed) when the GPU or slices are held. A pod put back (`reinstate`) gives its recorded `slot`,
    used when the node's slices are not known yet (sized by the catalogue). None, recording no
    instance, when the devices show no placement and no slot is given (a pod found bound before its
    node's slices were read): its devices are still held in the DeviceView, whose counters keep
    partitions apart, as before instances were recorded."""
    from gpufleet.fleet.state import AllocationError

    name = state.names[row]
    found = placement(state.devices.nodes.get(name), devices)
    known = mig.find_profile(state.specs[row].gpu_model, profile) if slot is not None else None
    if found is None and slot is not None and known is not None:
        found = (slot.gpu, slot.start, known.memory_slices)
    if found is None and slot is None:
        return None
    if found is None:
        raise AllocationError(f"pod {pod}: MIG slot {slot} of {name} has no known placement")
    gpu, start, size = found
    if not 0 <= gpu < state.gpu_count[row]:
        raise AllocationError(f"pod {pod}: node {name} has no GPU {gpu}")
    instances = state._mig[row].get(gpu, [])
    if not instances and (state.gpu_free[row, gpu] != GPU_MILLI or state.gpu_pods[row, gpu]):
        raise AllocationError(f"pod {pod}: GPU {gpu} of {name} is held whole or shared")
    for other in instances:
        if start < other.start + other.size and other.start < start + size:
            raise AllocationError(
                f"pod {pod}: memory slices {start}-{start + size - 1} of GPU {gpu} of {name} are held "
                f"by {other.holder}"
            )
    if not instances:
        state._mig[row][gpu] = instances
        state.gpu_free[row, gpu] = 0
        state._refresh_whole_free(row)
        state.touched.add(row)
    instances.append(MigInstance(profile, start, pod, size))
    return MigSlot(gpu, profile, start)


def remove(state: FleetState, pod: str, row: int, slot: MigSlot) -> None:
    """The pod's instance gone; its GPU whole again when no instance is left on it."""
    instances = state._mig[row][slot.gpu]
    instances[:] = [i for i in instances if not (i.start == slot.start and i.holder == pod)]
    if not instances:
        del state._mig[row][slot.gpu]
        state.gpu_free[row, slot.gpu] = GPU_MILLI
        state._refresh_whole_free(row)
        state.touched.add(row)


def partitioned(state: FleetState, row: int) -> np.ndarray:
    """Per GPU of a row without a fixed layout, the milli its dynamic instances take (all or none)."""
    taken = np.zeros(state.max_gpus, dtype=np.int64)
    for gpu in state._mig[row]:
        taken[gpu] = GPU_MILLI
    return taken


def check_dynamic_row(state: FleetState, row: int) -> None:
    """Dynamic instances: each held by the pod whose slot names it, none overlapping, on GPUs no pod
    holds whole or shared."""
    for gpu, instances in state._mig[row].items():
        assert instances, f"row {row} GPU {gpu}: an empty partition list"
        assert not state.gpu_pods[row, gpu], f"row {row} GPU {gpu} is partitioned and held whole or shared"
        taken: set[int] = set()
        for inst in instances:
            slices = set(range(inst.start, inst.start + inst.size))
            assert not taken & slices, f"row {row} GPU {gpu}: MIG slices held twice"
            taken |= slices
            assert inst.holder is not None
            alloc = state.allocations[inst.holder]
            assert alloc.node == row and alloc.mig == MigSlot(gpu, inst.profile, inst.start)
    for pod in state.node_pods[row]:
        slot = state.allocations[pod].mig
        if slot is not None:
            assert any(i.holder == pod for i in state._mig[row].get(slot.gpu, [])), f"{pod} lost its MIG"


def check_layout_row(state: FleetState, row: int) -> None:
    """A fixed layout's row: instances held once, by pods that know it, and `mig_free` their count."""
    holders = [i.holder for insts in state._mig[row].values() for i in insts if i.holder]
    assert len(holders) == len(set(holders)), "a MIG instance is held twice"
    for pod in holders:
        held = state.allocations[pod].mig
        assert held is not None and state.allocations[pod].node == row
    for pod in state.node_pods[row]:
        slot = state.allocations[pod].mig
        if slot is not None:
            inst = state._mig_instance(row, slot)
            assert inst is not None and inst.holder == pod, f"{pod} lost its MIG instance"
    free = np.zeros(state.mig_free.shape[1], dtype=np.int64)
    for gpu, insts in state._mig[row].items():
        if state.gpu_ok[row, gpu]:
            for inst in insts:
                if inst.holder is None:
                    free[state._mig_profile_index[inst.profile]] += 1
    assert np.array_equal(state.mig_free[row], free), f"row {row} mig_free drift"
    assert state.whole_free[row] == 0 and not state.gpu_pods[row].any()
