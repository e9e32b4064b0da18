"""GPU health: an XID and ECC event loop in its own thread, and the health state others watch.

The loop mirrors the NVIDIA plugin (NVIDIA-STACK.md sections 2 and 8): one NVML event set with the
XID-critical, double- and single-bit ECC events each GPU supports, waited on in 5 s slices. XIDs that
are the application's fault (13, 31, 43, 45, 68, 109 and any configured) are only logged; any other
XID or a double-bit ECC error marks the GPU (or, for an XID that names a GPU instance, that MIG
device) unhealthy, which `HealthState` turns into a ListAndWatch update. A wait error that names no
device marks every device unhealthy, as NVIDIA's plugin does.

Where NVIDIA's plugin never lets an unhealthy GPU recover, this one (unless `recoverAfterReset` is
false) brings it back once NVML shows that the GPU was reset and is clean: the GPU was seen lost and
is reachable again, or the driver asked for a reset and no longer does, or the volatile double-bit
ECC count fell (a reset clears it); and nothing is pending (row remapping, page retirement). A fault
that leaves no such trace keeps the GPU unhealthy until the agent restarts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.agent.config import Health
from gpufleet.agent.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    DeviceEvent,
    EventWaitError,
    HealthProbe,
    NodeInfo,
    NvmlBackend,
)

log = logging.getLogger("gpufleet.agent.health")


class HealthState:
    """Which devices are unhealthy and the last XID of each GPU; waiters wake on every change.

    Keys are GPU UUIDs or MIG UUIDs; a MIG device is unhealthy when it or its parent GPU is.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._unhealthy: dict[str, str] = {}
        self._last_xid: dict[str, int] = {}
        self.version = 0

    def mark_unhealthy(self, uuid: str, reason: str) -> bool:
        with self._cond:
            if uuid in self._unhealthy:
                return False
            self._unhealthy[uuid] = reason
            self._changed()
        log.warning("device %s marked unhealthy: %s", uuid, reason)
        return True

    def mark_healthy(self, uuid: str) -> bool:
        with self._cond:
            if self._unhealthy.pop(uuid, None) is None:
                return False
            self._changed()
        log.info("device %s is healthy again", uuid)
        return True

    def unhealthy(self) -> dict[str, str]:
        with self._cond:
            return dict(self._unhealthy)

    def is_healthy(self, uuid: str, parent: str | None = None) -> bool:
        with self._cond:
            return uuid not in self._unhealthy and (parent is None or parent not in self._unhealthy)

    def record_xid(self, gpu_uuid: str, xid: int) -> None:
        with self._cond:
            self._last_xid[gpu_uuid] = xid

    def last_xid(self, gpu_uuid: str) -> int:
        with self._cond:
            return self._last_xid.get(gpu_uuid, 0)

    def wait_for_change(self, since: int, stopped: Callable[[], bool], timeout: float | None = None) -> int:
        """Blocks until the version differs from `since` or `stopped()`; returns the current version."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != since or stopped(), timeout=timeout)
            return self.version

    def wake(self) -> None:
        """Wakes every waiter (used to end ListAndWatch streams)."""
        with self._cond:
            self._cond.notify_all()

    def _changed(self) -> None:
        self.version += 1
        self._cond.notify_all()


@dataclass
class _Fault:
    """What was seen of an unhealthy GPU since it was marked: the evidence a reset happened."""

    baseline: HealthProbe
    saw_lost: bool = False
    saw_reset_request: bool = False

    def observe(self, probe: HealthProbe) -> bool:
        """Records a probe; True once the GPU has been reset and is clean."""
        if not probe.reachable:
            self.saw_lost = True
            return False
        if probe.recovery_action not in (None, 0):
            self.saw_reset_request = True
            return False
        dbe_cleared = (
            bool(self.baseline.volatile_dbe)
            and probe.volatile_dbe is not None
            and probe.volatile_dbe < (self.baseline.volatile_dbe or 0)
        )
        return (self.saw_lost or self.saw_reset_request or dbe_cleared) and probe.clean


class HealthMonitor:
    """Runs the event loop in a daemon thread until `stop()`."""

    def __init__(self, backend: NvmlBackend, node: NodeInfo, config: Health, state: HealthState) -> None:
        self._backend = backend
        self._node = node
        self._config = config
        self.state = state
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._faults: dict[str, _Fault] = {}
        self._parents = {m.uuid: gpu.uuid for gpu in node.gpus for m in gpu.mig_devices}

    def set_node(self, node: NodeInfo) -> None:
        """Follows MIG instances created or destroyed since discovery (dynamic MIG): XIDs naming a GPU
        instance find the new ones. A destroyed instance's fault and unhealthy mark are dropped: its
        UUID is never used again, and a new instance at its placement is a new device."""
        parents = {m.uuid: gpu.uuid for gpu in node.gpus for m in gpu.mig_devices}
        for gone in set(self._parents) - set(parents):
            self._faults.pop(gone, None)
            self.state.mark_healthy(gone)
        self._node, self._parents = node, parents

    def start(self) -> None:
        if self._config.disabled:
            log.info("health checks are disabled")
            return
        self._backend.watch_events()
        self._thread = threading.Thread(target=self._run, name="gpufleet-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._config.wait_timeout_ms / 1000 + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._backend.wait_event(self._config.wait_timeout_ms)
            except EventWaitError as exc:
                self._on_wait_error(exc)
                self._stop.wait(1.0)
                continue
            if event is not None:
                self.handle(event)
            self.check_recovery()

    def _on_wait_error(self, exc: EventWaitError) -> None:
        targets = [exc.uuid] if exc.uuid else [gpu.uuid for gpu in self._node.gpus]
        for uuid in targets:
            self._mark(self._parents.get(uuid, uuid), uuid, f"NVML event wait failed: {exc}")

    def handle(self, event: DeviceEvent) -> None:
        """Acts on one event (public so tests and the twin can drive it without a thread)."""
        if event.event_type & EVENT_XID_CRITICAL:
            xid = event.data
            self.state.record_xid(event.uuid, xid)
            if not self._config.is_critical(xid):
                log.info("XID %d on %s is not critical; ignored", xid, event.uuid)
                return
            for target in self._xid_targets(event):
                self._mark(event.uuid, target, f"XID {xid}")
        elif event.event_type & EVENT_DOUBLE_BIT_ECC:
            self._mark(event.uuid, event.uuid, "double-bit ECC error")
        elif event.event_type & EVENT_SINGLE_BIT_ECC:
            log.info("single-bit ECC error on %s (corrected)", event.uuid)

    def _xid_targets(self, event: DeviceEvent) -> list[str]:
        """The MIG devices an XID names through its GPU/compute instance IDs, else the whole GPU."""
        if event.gi_id is None:
            return [event.uuid]
        try:
            gpu = self._node.gpu(event.uuid)
        except KeyError:
            return [event.uuid]
        matched = [
            m.uuid
            for m in gpu.mig_devices
            if m.gi_id == event.gi_id and (event.ci_id is None or m.ci_id == event.ci_id)
        ]
        return matched or [event.uuid]

    def _mark(self, gpu_uuid: str, target: str, reason: str) -> None:
        if self.state.mark_unhealthy(target, reason) and target not in self._faults:
            self._faults[target] = _Fault(baseline=self._probe(gpu_uuid))
            self._faults[target].observe(self._faults[target].baseline)

    def _probe(self, gpu_uuid: str) -> HealthProbe:
        try:
            return self._backend.probe(gpu_uuid)
        except Exception as exc:  # a probe must never kill the loop
            log.warning("health probe of %s failed: %s", gpu_uuid, exc)
            return HealthProbe(reachable=False)

    def check_recovery(self) -> None:
        """Brings back devices whose GPU NVML shows reset and clean (when recovery is enabled)."""
        if not self._config.recover_after_reset:
            return
        for target, fault in list(self._faults.items()):
            if fault.observe(self._probe(self._parents.get(target, target))):
                self._faults.pop(target, None)  # set_node may have dropped it meanwhile
                self.state.mark_healthy(target)
