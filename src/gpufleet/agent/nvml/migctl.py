"""Creating and destroying MIG instances through NVML, as mig-parted and NVIDIA's DRA driver (DynamicMIG)
do it: a GPU instance of a profile at an exact placement (`nvmlDeviceCreateGpuInstanceWithPlacement`),
then one compute instance spanning it (the compute-instance profile with as many slices as the GPU
instance has); destroying takes the compute instances first, then the GPU instance.

`MigControl` is what the DRA driver needs; `NvmlMigControl` does it over pynvml (or anything with its
functions, such as the tests' fake). Errors are `NvmlError`s naming the GPU and the placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gpufleet.agent.nvml.devices import NvmlError

# NVML's compute-instance profile constant (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE) by compute slices:
# the constants are not in slice order (7 is 0x4, 8 is 0x5, 6 is 0x6).
_CI_PROFILE_BY_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
_CI_ENGINE_SHARED = 0x0
_MAX_MIG_DEVICES = 7


@dataclass(frozen=True, slots=True)
class MigInstanceState:
    """One MIG device that exists on a GPU: its GPU instance (profile, placement) and compute instance."""

    gpu_uuid: str
    gi_id: int
    ci_id: int
    gi_profile_id: int
    start: int
    size: int
    uuid: str


class MigControl(Protocol):
    """The MIG devices of a GPU, listed, created at a placement and destroyed."""

    def instances(self, gpu_uuid: str) -> list[MigInstanceState]: ...

    def create(
        self, gpu_uuid: str, gi_profile_id: int, start: int, size: int, compute_slices: int
    ) -> MigInstanceState: ...

    def destroy(self, gpu_uuid: str, gi_id: int, ci_id: int) -> None: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlMigControl:
    """`MigControl` over pynvml's functions (`nv`: the pynvml module, initialised by its owner)."""

    def __init__(self, nv: Any) -> None:
        self._nv = nv

    def _not_found(self, exc: Exception) -> bool:
        return getattr(exc, "value", None) == getattr(self._nv, "NVML_ERROR_NOT_FOUND", 6)

    def instances(self, gpu_uuid: str) -> list[MigInstanceState]:
        nv = self._nv
        handle = nv.nvmlDeviceGetHandleByUUID(gpu_uuid)
        found: list[MigInstanceState] = []
        for j in range(_MAX_MIG_DEVICES):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            except nv.NVMLError as exc:
                if self._not_found(exc):  # a hole in the index space: a destroyed instance
                    continue
                raise NvmlError(f"GPU {gpu_uuid}: listing MIG devices: {exc}") from exc
            gi_id = int(nv.nvmlDeviceGetGpuInstanceId(mig))
            info = nv.nvmlGpuInstanceGetInfo(nv.nvmlDeviceGetGpuInstanceById(handle, gi_id))
            found.append(
                MigInstanceState(
                    gpu_uuid=gpu_uuid,
                    gi_id=gi_id,
                    ci_id=int(nv.nvmlDeviceGetComputeInstanceId(mig)),
                    gi_profile_id=int(info.profileId),
                    start=int(info.placement.start),
                    size=int(info.placement.size),
                    uuid=_text(nv.nvmlDeviceGetUUID(mig)),
                )
            )
        return found

    def create(
        self, gpu_uuid: str, gi_profile_id: int, start: int, size: int, compute_slices: int
    ) -> MigInstanceState:
        nv = self._nv
        where = f"GPU {gpu_uuid}: MIG GPU instance profile {gi_profile_id} at slices {start}+{size}"
        ci_profile = _CI_PROFILE_BY_SLICES.get(compute_slices)
        if ci_profile is None:
            raise NvmlError(f"{where}: no compute-instance profile of {compute_slices} slices")
        handle = nv.nvmlDeviceGetHandleByUUID(gpu_uuid)
        try:
            placement = nv.c_nvmlGpuInstancePlacement_t(start, size)
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, gi_profile_id, placement)
        except nv.NVMLError as exc:
            raise NvmlError(f"{where}: creating the GPU instance: {exc}") from exc
        gi_id = int(nv.nvmlGpuInstanceGetInfo(gi).id)
        try:
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile, _CI_ENGINE_SHARED)
            ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            ci_id = int(nv.nvmlComputeInstanceGetInfo(ci).id)
        except nv.NVMLError as exc:
            # nothing half made: a GPU instance without its compute instance is useless to a claim
            nv.nvmlGpuInstanceDestroy(gi)
            raise NvmlError(f"{where}: creating the compute instance: {exc}") from exc
        made = next((m for m in self.instances(gpu_uuid) if (m.gi_id, m.ci_id) == (gi_id, ci_id)), None)
        if made is None:
            raise NvmlError(f"{where}: created GI {gi_id} CI {ci_id}, but NVML lists no MIG device for it")
        return made

    def destroy(self, gpu_uuid: str, gi_id: int, ci_id: int) -> None:
        """Destroys the compute instance and its GPU instance; one already gone is not an error."""
        nv = self._nv
        handle = nv.nvmlDeviceGetHandleByUUID(gpu_uuid)
        try:
            gi = nv.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        except nv.NVMLError as exc:
            if self._not_found(exc):
                return
            raise NvmlError(f"GPU {gpu_uuid}: MIG GPU instance {gi_id}: {exc}") from exc
        try:
            nv.nvmlComputeInstanceDestroy(nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))
        except nv.NVMLError as exc:
            if not self._not_found(exc):
                raise NvmlError(f"GPU {gpu_uuid}: destroying MIG GI {gi_id} CI {ci_id}: {exc}") from exc
        try:
            nv.nvmlGpuInstanceDestroy(gi)
        except nv.NVMLError as exc:
            if not self._not_found(exc):
                raise NvmlError(f"GPU {gpu_uuid}: destroying MIG GPU instance {gi_id}: {exc}") from exc
