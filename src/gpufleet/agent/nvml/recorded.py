"""The recorded backend: a node profile replayed, with faults injected the way a real driver shows them."""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpufleet.agent.nvml.devices import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    DeviceEvent,
    EventWaitError,
    HealthProbe,
    NodeInfo,
    Telemetry,
)
from gpufleet.agent.nvml.profiles import node_from_json, read_profile, telemetry_from_json


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

    def inject_ecc(self, uuid: str, *, double_bit: bool = True, spare_rows: bool = True) -> None:
        """A single- or double-bit ECC event; a double-bit error raises the volatile DBE count.

        On a GPU that remaps rows (A100, H100: its telemetry reports remapped rows), the driver remaps
        the failing row as a real one does: one more row remapped for an uncorrectable error, or, with
        no `spare_rows` left in its bank, a failed remapping.
        """
        if double_bit:
            parent = self._parent(uuid)
            with self._lock:
                probe = self._probes[parent]
                self._probes[parent] = replace(probe, volatile_dbe=(probe.volatile_dbe or 0) + 1)
                seen = self._telemetry.get(parent, Telemetry())
                if seen.uncorrectable_remapped_rows is not None:
                    self._telemetry[parent] = (
                        replace(seen, uncorrectable_remapped_rows=seen.uncorrectable_remapped_rows + 1)
                        if spare_rows
                        else replace(seen, row_remap_failure=1.0)
                    )
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
