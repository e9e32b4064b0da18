"""What GPU discovery tells the rest of the agent: a node's GPUs and MIG devices, telemetry, health,
events, and the `NvmlBackend` interface every backend implements.

The NVML constants kept here are those of nvml.h that the agent's decisions read (event bits, topology
levels, recovery actions); the values are the same as pynvml's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.api.errors import GpuFleetError

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
    # The multi-node NVLink fabric clique (`<cluster UUID>.<clique id>`, as GPU Feature Discovery's
    # nvidia.com/gpu.clique label and NVIDIA's DRA driver write it): GPUs of a rack-scale NVLink domain
    # (GB200 NVL72) across nodes share it. None where the GPU is in no such fabric.
    fabric_clique: str | None = None

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


def iter_devices(node: NodeInfo) -> Iterator[tuple[Gpu, MigDevice | None]]:
    """Every GPU, and every MIG device after its parent (MIG devices paired with their GPU)."""
    for gpu in node.gpus:
        yield gpu, None
        for device in gpu.mig_devices:
            yield gpu, device


def uuids(node: NodeInfo) -> Iterable[str]:
    for gpu, device in iter_devices(node):
        yield device.uuid if device else gpu.uuid
