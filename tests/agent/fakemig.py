"""The fake pynvml with MIG instances that can be created and destroyed, as mig-parted and the DRA
driver's dynamic MIG use them: GPU instances at a placement (overlaps refused as NVML refuses them,
with INSUFFICIENT_RESOURCES), compute instances inside them, destroy in that order (a GPU instance with
a compute instance left is IN_USE). A MIG device exists (is listed, has a UUID) once its compute
instance does; `discover()` through `RealNvml` sees the same state."""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace
from typing import Any

import pynvml

from gpufleet.agent.migparted import gpu_model
from gpufleet.agent.nvml import MigDevice, NodeInfo
from gpufleet.sharing import mig

from .fakes import FakePynvml, _error


@dataclasses.dataclass
class _Gi:
    profile: mig.MigProfile
    start: int


class FakeMigPynvml(FakePynvml):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self._uuids = itertools.count(1)
        self.created: list[tuple[int, int, int]] = []
        """(GPU index, GI profile id, start) of every GPU instance created."""
        self.gis: dict[tuple[int, int], _Gi] = {}
        self.busy: set[str] = set()
        """UUIDs of MIG devices a process uses: destroying their compute instance is IN_USE."""
        for gpu in node.gpus:
            catalogue = {p.gi_profile_id: p for p in mig.catalogue(gpu_model(gpu)).values()}
            for m in gpu.mig_devices:
                self.gis[gpu.index, m.gi_id] = _Gi(catalogue[m.gi_profile_id], m.placement_start)

    @property
    def node(self) -> NodeInfo:
        return self._node

    def instances(self, index: int) -> list[tuple[str, int, int]]:
        """(profile, start, size) of the GPU's MIG devices."""
        return sorted(
            (m.profile, m.placement_start, m.placement_size) for m in self._node.gpus[index].mig_devices
        )

    def reboot(self) -> None:
        """A reboot: every MIG instance is gone."""
        self.gis.clear()
        self._set_gpus({gpu.index: () for gpu in self._node.gpus})

    def _set_gpus(self, devices: dict[int, tuple[MigDevice, ...]]) -> None:
        gpus = tuple(
            dataclasses.replace(g, mig_devices=devices.get(g.index, g.mig_devices)) for g in self._node.gpus
        )
        self._node = dataclasses.replace(self._node, gpus=gpus)

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi: int) -> Any:
        if (handle[1], gi) not in self.gis:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return ("gi", handle[1], gi)

    def nvmlGpuInstanceGetInfo(self, gi_handle: Any) -> Any:
        gi = self.gis[gi_handle[1], gi_handle[2]]
        return SimpleNamespace(
            id=gi_handle[2],
            profileId=gi.profile.gi_profile_id,
            placement=SimpleNamespace(start=gi.start, size=gi.profile.memory_slices),
        )

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: int, placement: Any) -> Any:
        index = handle[1]
        gpu = self._node.gpus[index]
        profile = next(
            (p for p in mig.catalogue(gpu_model(gpu)).values() if p.gi_profile_id == profile_id), None
        )
        if (
            not gpu.mig_enabled
            or profile is None
            or placement.start not in profile.starts
            or placement.size != profile.memory_slices
        ):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        wanted = set(range(placement.start, placement.start + placement.size))
        for (i, _), gi in self.gis.items():
            if i == index and wanted & set(range(gi.start, gi.start + gi.profile.memory_slices)):
                raise _error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = next(g for g in itertools.count(1) if (index, g) not in self.gis)
        self.gis[index, gi_id] = _Gi(profile, placement.start)
        self.created.append((index, profile_id, placement.start))
        return ("gi", index, gi_id)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi_handle: Any, profile: int, eng: int) -> Any:
        return SimpleNamespace(id=profile)

    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle: Any, profile_id: int) -> Any:
        _, index, gi_id = gi_handle
        gi = self.gis[index, gi_id]
        gpu = self._node.gpus[index]
        device = MigDevice(
            uuid=f"MIG-fake-{index}-{next(self._uuids)}",
            index=len(gpu.mig_devices),
            gi_id=gi_id,
            ci_id=0,
            profile=gi.profile.name,
            gi_profile_id=gi.profile.gi_profile_id,
            placement_start=gi.start,
            placement_size=gi.profile.memory_slices,
            memory_mib=gi.profile.memory_gb * 1024,
            multiprocessors=gi.profile.compute_slices * 14,
            gi_slices=gi.profile.compute_slices,
            ci_slices=gi.profile.compute_slices,
        )
        self._set_gpus({index: (*gpu.mig_devices, device)})
        return ("ci", index, gi_id, 0)

    def nvmlComputeInstanceGetInfo(self, ci_handle: Any) -> Any:
        return SimpleNamespace(id=ci_handle[3])

    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle: Any, ci: int) -> Any:
        _, index, gi_id = gi_handle
        if not any((m.gi_id, m.ci_id) == (gi_id, ci) for m in self._node.gpus[index].mig_devices):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return ("ci", index, gi_id, ci)

    def nvmlComputeInstanceDestroy(self, ci_handle: Any) -> None:
        _, index, gi_id, ci = ci_handle
        if any(
            (m.gi_id, m.ci_id) == (gi_id, ci) and m.uuid in self.busy
            for m in self._node.gpus[index].mig_devices
        ):
            raise _error(pynvml.NVML_ERROR_IN_USE)
        left = [m for m in self._node.gpus[index].mig_devices if (m.gi_id, m.ci_id) != (gi_id, ci)]
        self._set_gpus({index: tuple(dataclasses.replace(m, index=j) for j, m in enumerate(left))})

    def nvmlGpuInstanceDestroy(self, gi_handle: Any) -> None:
        _, index, gi_id = gi_handle
        if any(m.gi_id == gi_id for m in self._node.gpus[index].mig_devices):
            raise _error(pynvml.NVML_ERROR_IN_USE)
        del self.gis[index, gi_id]
