"""GPU discovery behind one interface, backed by real NVML or by a recorded node profile.

Everything above this module (device plugin, health, exporter, labels) sees a `NodeInfo` and an
`NvmlBackend`; whether the facts came from `libnvidia-ml.so` through `pynvml` (`RealNvml`) or from a
JSON profile recorded on a real machine (`RecordedNvml`) is invisible to it. Tests and the digital twin
use the recorded profiles shipped in `agent/profiles/`; `gpufleet agent inspect --record FILE` writes a
new one from a real machine.

The NVML calls and their pitfalls are those of shared/design/NVIDIA-STACK.md sections 4 to 8.
"""

from __future__ import annotations

import importlib
import json
import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from gpufleet.api.errors import GpuFleetError, ValidationError

PROFILE_SCHEMA = "gpufleet.io/node-profile/v1"
_MIB = 1024 * 1024

# NVML event type bits (nvml.h; the same values as pynvml's nvmlEventType*).
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
HEALTH_EVENT_MASK = EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_XID_CRITICAL
# eventData of an XID event whose XID NVML could not read.
XID_UNKNOWN = 999
# gpuInstanceId / computeInstanceId of an event that concerns no MIG instance.
NO_INSTANCE = 0xFFFFFFFF

# nvmlDeviceGetTopologyCommonAncestor levels, best first.
TOPOLOGY_INTERNAL = 0
TOPOLOGY_SINGLE = 10
TOPOLOGY_MULTIPLE = 20
TOPOLOGY_HOSTBRIDGE = 30
TOPOLOGY_NODE = 40
TOPOLOGY_SYSTEM = 50

# NVML_GPU_RECOVERY_ACTION_NONE: the driver asks for nothing.
RECOVERY_NONE = 0


class NvmlError(GpuFleetError):
    """NVML could not be loaded or answered with an error the agent cannot work around."""


class EventWaitError(Exception):
    """Waiting for NVML events failed with something other than a timeout.

    `uuid` is the device the failed event was about, when NVML could tell; None means the device is
    unknown and, as the NVIDIA plugin does, every device must be treated as affected.
    """

    def __init__(self, message: str, *, uuid: str | None = None) -> None:
        super().__init__(message)
        self.uuid = uuid


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device (a compute instance inside a GPU instance) of a MIG-enabled GPU."""

    uuid: str
    index: int
    gi_id: int
    ci_id: int
    profile: str
    gi_profile_id: int
    placement_start: int
    placement_size: int
    memory_mib: int
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as NVML describes it."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    pci_bus_id: str
    numa_node: int | None
    compute_capability: tuple[int, int]
    minor_number: int
    multiprocessors: int
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    # Active NVLinks whose far end is an NVSwitch, and direct GPU-to-GPU links per peer GPU index.
    nvlink_switch_links: int = 0
    nvlink_peers: Mapping[int, int] = field(default_factory=dict)

    @property
    def device_path(self) -> str:
        return f"/dev/nvidia{self.minor_number}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """Everything discovery learns about a node; the same whichever backend produced it."""

    hostname: str
    machine: str
    driver_version: str
    cuda_driver_version: int
    gpus: tuple[Gpu, ...]
    # pcie_ancestors[i][j]: nvmlDeviceGetTopologyCommonAncestor level between GPUs i and j.
    pcie_ancestors: tuple[tuple[int, ...], ...] = ()

    @property
    def cuda_version(self) -> tuple[int, int]:
        """The CUDA driver API version, e.g. (12, 4) for NVML's 12040."""
        return self.cuda_driver_version // 1000, (self.cuda_driver_version % 1000) // 10

    def gpu(self, uuid: str) -> Gpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise KeyError(uuid)

    def nvlinks(self, a: int, b: int) -> int:
        """How many NVLinks join GPUs a and b, directly or through the NVSwitch fabric of the board."""
        if a == b:
            return 0
        ga, gb = self.gpus[a], self.gpus[b]
        direct = ga.nvlink_peers.get(b, 0)
        switched = min(ga.nvlink_switch_links, gb.nvlink_switch_links)
        return direct + switched

    def pcie_level(self, a: int, b: int) -> int:
        if not self.pcie_ancestors:
            return TOPOLOGY_SYSTEM
        return self.pcie_ancestors[a][b]

    def nvlink_domains(self) -> list[list[int]]:
        """GPU indices grouped into NVLink domains: GPUs reachable over NVLink, singletons otherwise.

        All GPUs attached to the node's NVSwitches form one domain (an HGX board); direct links join
        their ends (PCIe cards bridged in pairs).
        """
        parent = list(range(len(self.gpus)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i in range(len(self.gpus)):
            for j in range(i + 1, len(self.gpus)):
                if self.nvlinks(i, j):
                    parent[find(j)] = find(i)
        groups: dict[int, list[int]] = {}
        for i in range(len(self.gpus)):
            groups.setdefault(find(i), []).append(i)
        return sorted(groups.values())


@dataclass(frozen=True, slots=True)
class Telemetry:
    """One reading of a GPU or MIG device, in DCGM's units; None where the device does not report it."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    memory_temp_c: float | None = None
    gpu_temp_c: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None
    pcie_tx_kb: float | None = None
    pcie_rx_kb: float | None = None
    pcie_replays: float | None = None
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    enc_util: float | None = None
    dec_util: float | None = None
    fb_free_mib: float | None = None
    fb_used_mib: float | None = None
    nvlink_bandwidth_total: float | None = None
    vgpu_license_status: float | None = None
    uncorrectable_remapped_rows: float | None = None
    correctable_remapped_rows: float | None = None
    row_remap_failure: float | None = None


@dataclass(frozen=True, slots=True)
class HealthProbe:
    """What NVML says of a device's health at one moment, used to decide recovery after a reset.

    `recovery_action` is NVML's GPU recovery action (0 none, 1 GPU reset, 2 node reboot, ...) or None
    where the driver does not report it; `volatile_dbe` the uncorrected volatile ECC count, which a reset
    clears; the two `pending` flags say memory repair waits for a reset.
    """

    reachable: bool = True
    recovery_action: int | None = None
    volatile_dbe: int | None = None
    pending_row_remap: bool = False
    pending_page_retirement: bool = False

    @property
    def clean(self) -> bool:
        return (
            self.reachable
            and self.recovery_action in (None, RECOVERY_NONE)
            and not self.pending_row_remap
            and not self.pending_page_retirement
        )


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """One NVML event: its type bits, its data (the XID for XID events) and the MIG instance, if any."""

    uuid: str
    event_type: int
    data: int
    gi_id: int | None = None
    ci_id: int | None = None


class NvmlBackend(Protocol):
    """The interface the rest of the agent uses; RealNvml and RecordedNvml both implement it."""

    def discover(self) -> NodeInfo: ...

    def telemetry(self, uuid: str) -> Telemetry: ...

    def probe(self, uuid: str) -> HealthProbe: ...

    def watch_events(self) -> None:
        """Registers every GPU for the health events (XID, single- and double-bit ECC) it supports."""

    def wait_event(self, timeout_ms: int) -> DeviceEvent | None:
        """The next event, or None after timeout_ms; raises EventWaitError on any other failure."""

    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------
# Profiles: NodeInfo <-> JSON


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def node_to_json(node: NodeInfo, *, telemetry: Mapping[str, Telemetry] | None = None) -> dict[str, Any]:
    """The profile form of a node (camelCase keys), optionally with one telemetry reading per device."""

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k) if isinstance(k, int) else _camel(k): convert(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [convert(v) for v in value]
        return value

    out: dict[str, Any] = {"schema": PROFILE_SCHEMA}
    out.update(convert(asdict(node)))
    for gpu in out["gpus"]:
        # Peers are keyed by GPU index; JSON keys are strings.
        gpu["nvlinkPeers"] = {str(k): v for k, v in gpu["nvlinkPeers"].items()}
    if telemetry:
        out["telemetry"] = {
            uuid: {_camel(k): v for k, v in asdict(t).items() if v is not None}
            for uuid, t in telemetry.items()
        }
    return out


def _from_json(cls: type[Any], data: Mapping[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = "".join("_" + c.lower() if c.isupper() else c for c in key)
        if name not in known:
            raise ValidationError(f"unknown field {key!r}", obj=where, field=key)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValidationError(str(exc), obj=where) from exc


def node_from_json(data: Mapping[str, Any], *, where: str = "profile") -> NodeInfo:
    """Parses a profile; raises ValidationError naming the file and field on any mistake."""
    if data.get("schema") != PROFILE_SCHEMA:
        raise ValidationError(f"expected schema {PROFILE_SCHEMA!r}", obj=where, field="schema")
    gpus = []
    for i, raw in enumerate(data.get("gpus", [])):
        raw = dict(raw)
        raw["migDevices"] = tuple(
            _from_json(MigDevice, m, f"{where}: gpus[{i}].migDevices[{j}]")
            for j, m in enumerate(raw.get("migDevices", []))
        )
        raw["nvlinkPeers"] = {int(k): int(v) for k, v in raw.get("nvlinkPeers", {}).items()}
        raw["computeCapability"] = tuple(raw.get("computeCapability", (0, 0)))
        gpus.append(_from_json(Gpu, raw, f"{where}: gpus[{i}]"))
    body = {k: v for k, v in data.items() if k not in ("schema", "gpus", "telemetry", "description")}
    body["gpus"] = tuple(gpus)
    body["pcieAncestors"] = tuple(tuple(row) for row in data.get("pcieAncestors", ()))
    node: NodeInfo = _from_json(NodeInfo, body, where)
    for i, gpu in enumerate(node.gpus):
        if gpu.index != i:
            raise ValidationError(f"GPU at position {i} has index {gpu.index}", obj=where, field=f"gpus[{i}]")
    return node


def telemetry_from_json(data: Mapping[str, Any], *, where: str = "profile") -> dict[str, Telemetry]:
    return {
        uuid: _from_json(Telemetry, values, f"{where}: telemetry.{uuid}")
        for uuid, values in data.get("telemetry", {}).items()
    }


def bundled_profiles() -> list[str]:
    """Names of the recorded profiles shipped with gpufleet (`hgx-h100`, ...)."""
    folder = resources.files("gpufleet.agent") / "profiles"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def read_profile(name_or_path: str | Path) -> dict[str, Any]:
    """The JSON of a profile file, or of a bundled profile given by name."""
    path = Path(name_or_path)
    if path.suffix != ".json" and not path.exists():
        bundled = resources.files("gpufleet.agent") / "profiles" / f"{name_or_path}.json"
        if not bundled.is_file():
            raise ValidationError(
                f"no profile file {str(name_or_path)!r} and no bundled profile of that name; "
                f"bundled: {', '.join(bundled_profiles())}",
                field="profile",
            )
        text = bundled.read_text()
        where = f"profile {name_or_path}"
    else:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValidationError(f"cannot read profile: {exc.strerror}", obj=str(path)) from exc
        where = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"not JSON: {exc}", obj=where) from exc
    if not isinstance(data, dict):
        raise ValidationError("a profile is a JSON object", obj=where)
    data["_where"] = where
    return data


# ----------------------------------------------------------------------------------------------
# Recorded backend


class RecordedNvml:
    """An NvmlBackend that replays a recorded node profile, with hooks to inject faults.

    Telemetry comes from the profile's `telemetry` section (per GPU or MIG UUID) and can be changed
    with `set_telemetry`; `inject_xid`, `inject_ecc` and `lose_gpu` queue NVML events and change what
    `probe` reports the way a real driver would; `reset_gpu` is what `nvidia-smi -r` does to it.
    """

    def __init__(self, node: NodeInfo, telemetry: Mapping[str, Telemetry] | None = None) -> None:
        self._node = node
        self._telemetry: dict[str, Telemetry] = dict(telemetry or {})
        self._probes: dict[str, HealthProbe] = {gpu.uuid: HealthProbe(volatile_dbe=0) for gpu in node.gpus}
        self._events: queue.Queue[DeviceEvent | EventWaitError] = queue.Queue()
        self._lock = threading.Lock()
        self.watching = False
        self.closed = False

    @classmethod
    def from_profile(cls, name_or_path: str | Path) -> RecordedNvml:
        data = read_profile(name_or_path)
        where = data.pop("_where")
        return cls(node_from_json(data, where=where), telemetry_from_json(data, where=where))

    # NvmlBackend
    def discover(self) -> NodeInfo:
        return self._node

    def telemetry(self, uuid: str) -> Telemetry:
        with self._lock:
            return self._telemetry.get(uuid, Telemetry())

    def probe(self, uuid: str) -> HealthProbe:
        with self._lock:
            return self._probes[self._parent(uuid)]

    def watch_events(self) -> None:
        self.watching = True

    def wait_event(self, timeout_ms: int) -> DeviceEvent | None:
        try:
            item = self._events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None
        if isinstance(item, EventWaitError):
            raise item
        return item

    def close(self) -> None:
        self.closed = True

    # Fault injection
    def set_telemetry(self, uuid: str, **values: float | None) -> None:
        with self._lock:
            self._telemetry[uuid] = replace(self._telemetry.get(uuid, Telemetry()), **values)

    def inject_xid(
        self,
        uuid: str,
        xid: int,
        *,
        gi_id: int | None = None,
        ci_id: int | None = None,
        needs_reset: bool = True,
    ) -> None:
        """An XID event on a GPU (or on one MIG instance of it); a real driver then asks for a reset."""
        if needs_reset:
            self._update_probe(uuid, recovery_action=1)
        self._events.put(DeviceEvent(self._parent(uuid), EVENT_XID_CRITICAL, xid, gi_id, ci_id))

    def inject_ecc(self, uuid: str, *, double_bit: bool = True) -> None:
        """A single- or double-bit ECC event; a double-bit error raises the volatile DBE count."""
        if double_bit:
            with self._lock:
                probe = self._probes[self._parent(uuid)]
                self._probes[self._parent(uuid)] = replace(probe, volatile_dbe=(probe.volatile_dbe or 0) + 1)
        bit = EVENT_DOUBLE_BIT_ECC if double_bit else EVENT_SINGLE_BIT_ECC
        self._events.put(DeviceEvent(self._parent(uuid), bit, 0))

    def inject_wait_error(self, message: str = "unknown error", *, uuid: str | None = None) -> None:
        self._events.put(EventWaitError(message, uuid=uuid))

    def lose_gpu(self, uuid: str) -> None:
        """The GPU fell off the bus (XID 79): unreachable until reset."""
        self._update_probe(uuid, reachable=False)
        self._events.put(DeviceEvent(self._parent(uuid), EVENT_XID_CRITICAL, 79))

    def reset_gpu(self, uuid: str) -> None:
        """A GPU reset: reachable again, nothing pending, volatile ECC counters cleared."""
        with self._lock:
            self._probes[self._parent(uuid)] = HealthProbe(volatile_dbe=0)

    def _update_probe(self, uuid: str, **changes: Any) -> None:
        with self._lock:
            key = self._parent(uuid)
            self._probes[key] = replace(self._probes[key], **changes)

    def _parent(self, uuid: str) -> str:
        for gpu in self._node.gpus:
            if gpu.uuid == uuid or any(m.uuid == uuid for m in gpu.mig_devices):
                return gpu.uuid
        raise KeyError(f"no GPU or MIG device {uuid} on this node")


# ----------------------------------------------------------------------------------------------
# Real backend


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
        )

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


def open_backend(profile: str | Path | None) -> NvmlBackend:
    """The recorded profile when one is named, else real NVML."""
    if profile:
        return RecordedNvml.from_profile(profile)
    return RealNvml()


def iter_devices(node: NodeInfo) -> Iterator[tuple[Gpu, MigDevice | None]]:
    """Every GPU, and every MIG device after its parent (MIG devices paired with their GPU)."""
    for gpu in node.gpus:
        yield gpu, None
        for device in gpu.mig_devices:
            yield gpu, device


def uuids(node: NodeInfo) -> Iterable[str]:
    for gpu, device in iter_devices(node):
        yield device.uuid if device else gpu.uuid
