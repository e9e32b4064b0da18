"""The health monitor's decisions, event by event (test_deviceplugin covers the threaded loop)."""

from __future__ import annotations

import time

from gpufleet.agent.config import parse_config
from gpufleet.agent.health import HealthMonitor, HealthState
from gpufleet.agent.nvml import EVENT_SINGLE_BIT_ECC, EVENT_XID_CRITICAL, DeviceEvent, RecordedNvml


def _monitor(backend: RecordedNvml, **health: object) -> HealthMonitor:
    return HealthMonitor(backend, backend.discover(), parse_config({"health": health}).health, HealthState())


def test_ignored_xids_are_recorded_but_change_nothing(h100: RecordedNvml) -> None:
    monitor = _monitor(h100)
    gpu = h100.discover().gpus[0].uuid
    for xid in (13, 31, 43, 45, 68, 109):
        monitor.handle(DeviceEvent(gpu, EVENT_XID_CRITICAL, xid))
    assert monitor.state.unhealthy() == {}
    assert monitor.state.last_xid(gpu) == 109
    monitor.handle(DeviceEvent(gpu, EVENT_SINGLE_BIT_ECC, 0))
    assert monitor.state.unhealthy() == {}


def test_configured_ignored_xid(h100: RecordedNvml) -> None:
    monitor = _monitor(h100, ignoredXIDs=[94])
    gpu = h100.discover().gpus[1].uuid
    monitor.handle(DeviceEvent(gpu, EVENT_XID_CRITICAL, 94))
    assert monitor.state.is_healthy(gpu)
    monitor.handle(DeviceEvent(gpu, EVENT_XID_CRITICAL, 48))
    assert monitor.state.unhealthy() == {gpu: "XID 48"}


def test_lost_gpu_recovers_only_after_it_is_back_and_clean(h100: RecordedNvml) -> None:
    monitor = _monitor(h100)
    gpu = h100.discover().gpus[2].uuid
    h100.lose_gpu(gpu)
    monitor.handle(h100.wait_event(100))  # type: ignore[arg-type]
    monitor.check_recovery()
    assert not monitor.state.is_healthy(gpu)
    h100.reset_gpu(gpu)
    monitor.check_recovery()
    assert monitor.state.is_healthy(gpu)


def test_xid_without_any_reset_evidence_stays_unhealthy(h100: RecordedNvml) -> None:
    monitor = _monitor(h100)
    gpu = h100.discover().gpus[4].uuid
    h100.inject_xid(gpu, 62, needs_reset=False)
    monitor.handle(h100.wait_event(100))  # type: ignore[arg-type]
    for _ in range(3):
        monitor.check_recovery()
    assert not monitor.state.is_healthy(gpu)


def test_double_bit_ecc_recovers_when_the_reset_clears_the_volatile_count(h100: RecordedNvml) -> None:
    monitor = _monitor(h100)
    gpu = h100.discover().gpus[5].uuid
    h100.inject_ecc(gpu)
    monitor.handle(h100.wait_event(100))  # type: ignore[arg-type]
    monitor.check_recovery()
    assert not monitor.state.is_healthy(gpu)
    h100.reset_gpu(gpu)
    monitor.check_recovery()
    assert monitor.state.is_healthy(gpu)


def test_a_double_bit_ecc_error_remaps_a_row_or_fails_to_as_a_real_gpu_reports(h100: RecordedNvml) -> None:
    """What the exporter's remapped-rows series (and the uncorrectable-memory alert) read."""
    five, six = h100.discover().gpus[5].uuid, h100.discover().gpus[6].uuid
    h100.inject_ecc(five)
    h100.inject_ecc(six, spare_rows=False)
    h100.inject_ecc(six, double_bit=False)
    assert h100.telemetry(five).uncorrectable_remapped_rows == 1.0
    assert h100.telemetry(five).row_remap_failure == 0.0
    assert h100.telemetry(six).uncorrectable_remapped_rows == 0.0
    assert h100.telemetry(six).row_remap_failure == 1.0
    h100.reset_gpu(five)  # a reset does not undo a remapping: the rows are gone for good
    assert h100.telemetry(five).uncorrectable_remapped_rows == 1.0


def test_wait_error_without_a_device_marks_every_gpu(h100: RecordedNvml) -> None:
    monitor = _monitor(h100, waitTimeoutMs=20)
    monitor.start()
    try:
        h100.inject_wait_error("NVML_ERROR_UNKNOWN")
        deadline = time.monotonic() + 5
        while len(monitor.state.unhealthy()) < 8 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        monitor.stop()
    assert len(monitor.state.unhealthy()) == 8
    assert h100.watching


def test_disabled_health_checks_start_no_thread(h100: RecordedNvml) -> None:
    monitor = _monitor(h100, disabled=True)
    monitor.start()
    assert not h100.watching
    monitor.stop()
