"""GPU discovery behind one interface, backed by real NVML or by a recorded node profile.

Everything above this package (device plugin, health, exporter, labels) sees a `NodeInfo` and an
`NvmlBackend`; whether the facts came from `libnvidia-ml.so` through `pynvml` (`RealNvml`) or from a
JSON profile recorded on a real machine (`RecordedNvml`) is invisible to it. Tests and the digital twin
use the recorded profiles shipped in `agent/profiles/`; `gpufleet agent inspect --record FILE` writes a
new one from a real machine.

- `devices`: the node, GPU, MIG device, telemetry, health and event types, and `NvmlBackend`;
- `profiles`: profiles to and from JSON, the bundled ones;
- `recorded`: `RecordedNvml`, a profile replayed with fault injection;
- `real`: `RealNvml`, over pynvml.

The NVML calls and their pitfalls are those of shared/design/NVIDIA-STACK.md sections 4 to 8.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.agent.nvml.devices import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    HEALTH_EVENT_MASK,
    NO_INSTANCE,
    RECOVERY_NONE,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    XID_UNKNOWN,
    DeviceEvent,
    EventWaitError,
    Gpu,
    HealthProbe,
    MigDevice,
    NodeInfo,
    NvmlBackend,
    NvmlError,
    Telemetry,
    iter_devices,
    uuids,
)
from gpufleet.agent.nvml.profiles import (
    PROFILE_SCHEMA,
    bundled_profiles,
    node_from_json,
    node_to_json,
    read_profile,
    telemetry_from_json,
)
from gpufleet.agent.nvml.real import RealNvml, normalize_bus_id
from gpufleet.agent.nvml.recorded import RecordedNvml

__all__ = [
    "EVENT_DOUBLE_BIT_ECC",
    "EVENT_SINGLE_BIT_ECC",
    "EVENT_XID_CRITICAL",
    "HEALTH_EVENT_MASK",
    "NO_INSTANCE",
    "PROFILE_SCHEMA",
    "RECOVERY_NONE",
    "TOPOLOGY_HOSTBRIDGE",
    "TOPOLOGY_INTERNAL",
    "TOPOLOGY_MULTIPLE",
    "TOPOLOGY_NODE",
    "TOPOLOGY_SINGLE",
    "TOPOLOGY_SYSTEM",
    "XID_UNKNOWN",
    "DeviceEvent",
    "EventWaitError",
    "Gpu",
    "HealthProbe",
    "MigDevice",
    "NodeInfo",
    "NvmlBackend",
    "NvmlError",
    "RealNvml",
    "RecordedNvml",
    "Telemetry",
    "bundled_profiles",
    "iter_devices",
    "node_from_json",
    "node_to_json",
    "normalize_bus_id",
    "open_backend",
    "read_profile",
    "telemetry_from_json",
    "uuids",
]


def open_backend(profile: str | Path | None) -> NvmlBackend:
    """The recorded profile when one is named, else real NVML."""
    if profile:
        return RecordedNvml.from_profile(profile)
    return RealNvml()
