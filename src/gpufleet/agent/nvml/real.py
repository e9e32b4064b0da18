"""The real backend: libnvidia-ml through `pynvml`, with the pitfalls of shared/design/NVIDIA-STACK.md
sections 4 to 8 worked around (unsupported calls, MIG handles, vGPU, event waits)."""

from __future__ import annotations

import importlib
import socket
import uuid as uuid_module
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpufleet.agent.nvml.devices import (
    HEALTH_EVENT_MASK,
    NO_INSTANCE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_SYSTEM,
    DeviceEvent,
    EventWaitError,
    Gpu,
    HealthProbe,
    MigDevice,
    NodeInfo,
    NvmlError,
    Telemetry,
)
from gpufleet.agent.nvml.migctl import NvmlMigControl

_MIB = 1024 * 1024


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def normalize_bus_id(bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` as sysfs spells it: `0000:3b:00.0`."""
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    if len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}:{rest}"


def _sysfs_numa_node(bus_id: str) -> int | None:
    try:
        value = int(Path(f"/sys/bus/pci/devices/{normalize_bus_id(bus_id)}/numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _machine_type() -> str:
    try:
        return Path("/sys/class/dmi/id/product_name").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


class RealNvml:
    """An NvmlBackend over libnvidia-ml through `pynvml` (the `nvidia-ml-py` distribution).

    `nvml` may be given a module-like object with pynvml's functions and constants (tests pass a fake
    driven by a recorded profile); by default `pynvml` itself is imported and initialised once.
    """

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            nvml = importlib.import_module("pynvml")
        self._nv = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlError(
                f"cannot initialise NVML ({exc}); is the NVIDIA driver installed? "
                "Use --profile to run on a recorded node instead"
            ) from exc
        except OSError as exc:
            raise NvmlError(f"cannot load libnvidia-ml ({exc}); use --profile for a recorded node") from exc
        self._event_set: Any = None
        self._handles: dict[str, Any] = {}

    def mig_control(self) -> NvmlMigControl:
        """MIG instances of this node's GPUs created and destroyed through this NVML (dynamic MIG)."""
        return NvmlMigControl(self._nv)

    # Helpers
    def _try(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), or None when NVML says the device does not support it (or any NVML error)."""
        try:
            return fn(*args)
        except self._nv.NVMLError:
            return None

    def _handle(self, uuid: str) -> Any:
        handle = self._handles.get(uuid)
        if handle is None:
            handle = self._nv.nvmlDeviceGetHandleByUUID(uuid)
            self._handles[uuid] = handle
        return handle

    def _field(self, handle: Any, field_id: int) -> float | None:
        values = self._try(self._nv.nvmlDeviceGetFieldValues, handle, [field_id])
        if not values or values[0].nvmlReturn != self._nv.NVML_SUCCESS:
            return None
        value = values[0]
        kind = value.valueType
        union = value.value
        by_type = {
            self._nv.NVML_VALUE_TYPE_DOUBLE: "dVal",
            self._nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            self._nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
            self._nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            self._nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        }
        attr = by_type.get(kind)
        return float(getattr(union, attr)) if attr else None

    # Discovery
    def discover(self) -> NodeInfo:
        nv = self._nv
        count = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus_ids = [normalize_bus_id(_text(nv.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
        by_bus = {bus: i for i, bus in enumerate(bus_ids)}
        gpus = tuple(self._gpu(i, h, by_bus) for i, h in enumerate(handles))
        ancestors = tuple(
            tuple(
                TOPOLOGY_INTERNAL if i == j else self._topology(handles[i], handles[j]) for j in range(count)
            )
            for i in range(count)
        )
        return NodeInfo(
            hostname=socket.gethostname(),
            machine=_machine_type(),
            driver_version=_text(nv.nvmlSystemGetDriverVersion()),
            cuda_driver_version=int(nv.nvmlSystemGetCudaDriverVersion()),
            gpus=gpus,
            pcie_ancestors=ancestors,
        )

    def _topology(self, a: Any, b: Any) -> int:
        level = self._try(self._nv.nvmlDeviceGetTopologyCommonAncestor, a, b)
        return int(level) if level is not None else TOPOLOGY_SYSTEM

    def _gpu(self, index: int, handle: Any, by_bus: Mapping[str, int]) -> Gpu:
        nv = self._nv
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
        self._handles[uuid] = handle
        bus_id = _text(nv.nvmlDeviceGetPciInfo(handle).busId)
        numa = self._try(nv.nvmlDeviceGetNumaNodeId, handle)
        if numa is None or numa < 0:
            numa = _sysfs_numa_node(bus_id)
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        attrs = self._try(nv.nvmlDeviceGetAttributes, handle)
        mig_mode = self._try(nv.nvmlDeviceGetMigMode, handle)
        mig_enabled = bool(mig_mode is not None and mig_mode[0] == nv.NVML_DEVICE_MIG_ENABLE)
        name = _text(nv.nvmlDeviceGetName(handle))
        switch_links, peers = self._nvlinks(handle, by_bus)
        return Gpu(
            index=index,
            uuid=uuid,
            name=name,
            memory_mib=int(nv.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
            pci_bus_id=bus_id,
            numa_node=numa,
            compute_capability=(int(major), int(minor)),
            minor_number=int(nv.nvmlDeviceGetMinorNumber(handle)),
            multiprocessors=int(attrs.multiprocessorCount) if attrs is not None else 0,
            mig_capable=mig_mode is not None,
            mig_enabled=mig_enabled,
            mig_devices=self._mig_devices(handle) if mig_enabled else (),
            nvlink_switch_links=switch_links,
            nvlink_peers=peers,
            fabric_clique=self._fabric_clique(handle),
        )

    def _fabric_clique(self, handle: Any) -> str | None:
        """`<cluster UUID>.<clique id>` once the fabric manager has registered the GPU, else None (no
        fabric, registration not done, or a driver without the query)."""
        nv = self._nv
        query = getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
        make = getattr(nv, "c_nvmlGpuFabricInfoV_t", None)
        if query is None or make is None:
            return None
        info = make()
        if self._try(query, handle, info) is None:
            return None
        done = info.state == nv.NVML_GPU_FABRIC_STATE_COMPLETED and info.status == nv.NVML_SUCCESS
        cluster = bytes(info.clusterUuid)
        if not done or not any(cluster):
            return None
        return f"{uuid_module.UUID(bytes=cluster)}.{int(info.cliqueId)}"

    def _nvlinks(self, handle: Any, by_bus: Mapping[str, int]) -> tuple[int, dict[int, int]]:
        """Active links to NVSwitches, and direct links per peer GPU (go-gpuallocator's counting)."""
        nv = self._nv
        switch_links = 0
        peers: dict[int, int] = {}
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            state = self._try(nv.nvmlDeviceGetNvLinkState, handle, link)
            if state != nv.NVML_FEATURE_ENABLED:
                continue
            remote_type = self._try(nv.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            if remote_type == nv.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                switch_links += 1
                continue
            remote = self._try(nv.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            if remote is None:
                continue
            peer = by_bus.get(normalize_bus_id(_text(remote.busId)))
            if peer is not None:
                peers[peer] = peers.get(peer, 0) + 1
        return switch_links, peers

    def _mig_devices(self, handle: Any) -> tuple[MigDevice, ...]:
        nv = self._nv
        devices = []
        for j in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
            mig_handle = self._try(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
            if mig_handle is None:
                continue
            uuid = _text(nv.nvmlDeviceGetUUID(mig_handle))
            self._handles[uuid] = mig_handle
            gi_id = int(nv.nvmlDeviceGetGpuInstanceId(mig_handle))
            ci_id = int(nv.nvmlDeviceGetComputeInstanceId(mig_handle))
            attrs = nv.nvmlDeviceGetAttributes(mig_handle)
            # The MIG device's name ends in its profile: "NVIDIA A100-SXM4-80GB MIG 1g.10gb".
            mig_name = _text(nv.nvmlDeviceGetName(mig_handle))
            profile = mig_name.rsplit("MIG ", 1)[-1] if "MIG " in mig_name else ""
            gi_info = self._try(
                lambda h, g: nv.nvmlGpuInstanceGetInfo(nv.nvmlDeviceGetGpuInstanceById(h, g)), handle, gi_id
            )
            start = int(gi_info.placement.start) if gi_info is not None else 0
            size = int(gi_info.placement.size) if gi_info is not None else 0
            gi_profile_id = int(gi_info.profileId) if gi_info is not None else -1
            if not profile:
                profile = f"{attrs.gpuInstanceSliceCount}g.{round(attrs.memorySizeMB / 1024)}gb"
            devices.append(
                MigDevice(
                    uuid=uuid,
                    index=j,
                    gi_id=gi_id,
                    ci_id=ci_id,
                    profile=profile,
                    gi_profile_id=gi_profile_id,
                    placement_start=start,
                    placement_size=size,
                    memory_mib=int(attrs.memorySizeMB),
                    multiprocessors=int(attrs.multiprocessorCount),
                    gi_slices=int(attrs.gpuInstanceSliceCount),
                    ci_slices=int(attrs.computeInstanceSliceCount),
                    copy_engines=int(attrs.sharedCopyEngineCount),
                    decoders=int(attrs.sharedDecoderCount),
                    encoders=int(attrs.sharedEncoderCount),
                    jpegs=int(attrs.sharedJpegCount),
                    ofas=int(attrs.sharedOfaCount),
                )
            )
        return tuple(devices)

    # Telemetry
    def telemetry(self, uuid: str) -> Telemetry:
        nv = self._nv
        try:
            handle = self._handle(uuid)
        except nv.NVMLError:
            return Telemetry()
        memory = self._try(nv.nvmlDeviceGetMemoryInfo, handle)
        fb = {}
        if memory is not None:
            fb = {"fb_free_mib": memory.free / _MIB, "fb_used_mib": memory.used / _MIB}
        if uuid.startswith("MIG-"):
            # Device-level counters are the parent's; only memory is per instance.
            return Telemetry(**fb)
        util = self._try(nv.nvmlDeviceGetUtilizationRates, handle)
        enc = self._try(nv.nvmlDeviceGetEncoderUtilization, handle)
        dec = self._try(nv.nvmlDeviceGetDecoderUtilization, handle)
        power = self._try(nv.nvmlDeviceGetPowerUsage, handle)
        rows = self._try(nv.nvmlDeviceGetRemappedRows, handle)
        tx = self._field(handle, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
        rx = self._field(handle, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)

        def num(value: Any) -> float | None:
            return None if value is None else float(value)

        return Telemetry(
            sm_clock_mhz=num(self._try(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)),
            mem_clock_mhz=num(self._try(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM)),
            memory_temp_c=self._field(handle, nv.NVML_FI_DEV_MEMORY_TEMP),
            gpu_temp_c=num(self._try(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)),
            power_w=None if power is None else power / 1000.0,
            energy_mj=num(self._try(nv.nvmlDeviceGetTotalEnergyConsumption, handle)),
            pcie_tx_kb=num(self._try(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_TX_BYTES)),
            pcie_rx_kb=num(self._try(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_RX_BYTES)),
            pcie_replays=num(self._try(nv.nvmlDeviceGetPcieReplayCounter, handle)),
            gpu_util=None if util is None else float(util.gpu),
            mem_copy_util=None if util is None else float(util.memory),
            enc_util=None if enc is None else float(enc[0]),
            dec_util=None if dec is None else float(dec[0]),
            nvlink_bandwidth_total=None if tx is None or rx is None else tx + rx,
            uncorrectable_remapped_rows=None if rows is None else float(rows[1]),
            correctable_remapped_rows=None if rows is None else float(rows[0]),
            row_remap_failure=None if rows is None else float(rows[3]),
            vgpu_license_status=self._vgpu_license_status(handle),
            **fb,
        )

    def _vgpu_license_status(self, handle: Any) -> float | None:
        """DCGM_FI_DEV_VGPU_LICENSE_STATUS: 1 when the GPU's vGPU licence is held, 0 when it is not, None
        where NVML says there is no vGPU licensing to report (bare metal, usually)."""
        nv = self._nv
        mode = self._try(nv.nvmlDeviceGetVirtualizationMode, handle)
        if mode in (nv.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU, nv.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA):
            # A hypervisor: the licences are the vGPU instances' (held by their VMs); the GPU counts as
            # licensed only when every active instance is.
            instances = self._try(nv.nvmlDeviceGetActiveVgpus, handle)
            if not instances:
                return None
            statuses = [self._try(nv.nvmlVgpuInstanceGetLicenseStatus, i) for i in instances]
            if any(status is None for status in statuses):
                return None
            return float(all(statuses))
        # A VM with a vGPU (or anything else): NVML lists the licensable features and their state.
        features = self._try(nv.nvmlDeviceGetGridLicensableFeatures, handle)
        if features is None or not features.isGridLicenseSupported:
            return None
        listed = features.gridLicensableFeatures[: features.licensableFeaturesCount]
        return float(any(feature.featureState for feature in listed))

    # Health
    def probe(self, uuid: str) -> HealthProbe:
        nv = self._nv
        try:
            handle = self._handle(uuid)
            if uuid.startswith("MIG-"):
                handle = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            nv.nvmlDeviceGetPciInfo(handle)
        except nv.NVMLError:
            self._handles.pop(uuid, None)
            return HealthProbe(reachable=False)
        action_field = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        action = self._field(handle, action_field) if action_field is not None else None
        dbe = self._try(
            nv.nvmlDeviceGetTotalEccErrors,
            handle,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_VOLATILE_ECC,
        )
        rows = self._try(nv.nvmlDeviceGetRemappedRows, handle)
        retire = self._try(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        return HealthProbe(
            reachable=True,
            recovery_action=None if action is None else int(action),
            volatile_dbe=None if dbe is None else int(dbe),
            pending_row_remap=bool(rows[2]) if rows is not None else False,
            pending_page_retirement=bool(retire) if retire is not None else False,
        )

    def watch_events(self) -> None:
        nv = self._nv
        self._event_set = nv.nvmlEventSetCreate()
        for i in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            supported = self._try(nv.nvmlDeviceGetSupportedEventTypes, handle) or 0
            mask = HEALTH_EVENT_MASK & int(supported)
            if mask:
                nv.nvmlDeviceRegisterEvents(handle, mask, self._event_set)

    def wait_event(self, timeout_ms: int) -> DeviceEvent | None:
        nv = self._nv
        if self._event_set is None:
            raise EventWaitError("watch_events was not called")
        try:
            data = nv.nvmlEventSetWait(self._event_set, timeout_ms)
        except nv.NVMLError_Timeout:
            return None
        except nv.NVMLError as exc:
            raise EventWaitError(f"waiting for NVML events failed: {exc}") from exc
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(data.device))
        except nv.NVMLError as exc:
            raise EventWaitError(f"cannot read the UUID of an event's device: {exc}") from exc
        gi = int(data.gpuInstanceId)
        ci = int(data.computeInstanceId)
        return DeviceEvent(
            uuid=uuid,
            event_type=int(data.eventType),
            data=int(data.eventData),
            gi_id=None if gi == NO_INSTANCE else gi,
            ci_id=None if ci == NO_INSTANCE else ci,
        )

    def close(self) -> None:
        nv = self._nv
        if self._event_set is not None:
            self._try(nv.nvmlEventSetFree, self._event_set)
            self._event_set = None
        self._try(nv.nvmlShutdown)
