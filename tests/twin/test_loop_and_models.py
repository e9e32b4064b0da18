"""The twin's event loop, clocks, training run arithmetic and traffic model."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.twin.clock import VIRTUAL_EPOCH, VirtualClock
from gpufleet.twin.config import Traffic
from gpufleet.twin.loop import EventLoop
from gpufleet.twin.traffic import expected_rps, observed_rps, p99_latency_ms, traffic_for
from gpufleet.twin.training import Run


def test_events_run_in_time_then_priority_then_fifo_order() -> None:
    loop = EventLoop()
    seen: list[str] = []
    loop.schedule(at=2.0, action=lambda t: seen.append("late"))
    loop.schedule(at=1.0, action=lambda t: seen.append("b"), priority=1)
    loop.schedule(at=1.0, action=lambda t: seen.append("a1"))
    loop.schedule(at=1.0, action=lambda t: seen.append("a2"))
    cancelled = loop.schedule(at=1.5, action=lambda t: seen.append("never"))
    cancelled.cancel()
    assert loop.run_due(1.5) == 3
    assert seen == ["a1", "a2", "b"]
    assert loop.next_time() == 2.0
    loop.run_due(10.0)
    assert seen[-1] == "late" and loop.next_time() is None


def test_an_event_scheduled_for_now_by_an_event_runs_in_the_same_pass() -> None:
    loop = EventLoop()
    seen: list[float] = []
    loop.schedule(at=1.0, action=lambda t: loop.schedule(at=t, action=seen.append))
    loop.run_due(1.0)
    assert seen == [1.0]


def test_virtual_clock_moves_only_forward() -> None:
    clock = VirtualClock()
    assert clock.now() == VIRTUAL_EPOCH
    clock.advance_to(VIRTUAL_EPOCH + 5)
    assert clock.datetime().second == 5
    with pytest.raises(ValueError):
        clock.advance_to(VIRTUAL_EPOCH)


def test_run_resumes_from_checkpoint_and_slows_down_when_shrunk() -> None:
    run = Run(job="j", namespace="n", duration=3600, interval=600, replicas=4, progress=1200, updated=0.0)
    run.running = 4
    assert run.next_checkpoint() == 1800
    assert run.time_to(3600) == 2400
    run.advance(100)
    assert run.progress == 1300
    run.running = 2  # elastic: half the workers, half the speed
    run.advance(200)
    assert run.progress == 1350  # 100 s at half speed
    assert run.time_to(1800) == 900
    run.progress = 3400
    assert run.next_checkpoint() is None  # the last one would be at the end: completion instead


def test_traffic_curve_peaks_at_the_peak_hour_and_latency_grows_with_load() -> None:
    traffic = Traffic(base_rps=10, peak_rps=110, peak_hour=14, noise=0)
    at = VIRTUAL_EPOCH
    assert expected_rps(traffic, at + 14 * 3600) == pytest.approx(110)
    assert expected_rps(traffic, at + 2 * 3600) == pytest.approx(10)
    rng = np.random.default_rng(0)
    assert observed_rps(traffic, at + 14 * 3600, rng) == pytest.approx(110)
    low = p99_latency_ms(traffic, 30, 2)
    high = p99_latency_ms(traffic, 100, 2)
    assert traffic.base_latency_ms < low < high
    assert p99_latency_ms(traffic, 10, 0) == traffic.base_latency_ms * 100
    custom = traffic_for(traffic, {"twin.gpufleet.io/peak-rps": "500", "twin.gpufleet.io/base-rps": "x"})
    assert custom.peak_rps == 500 and custom.base_rps == 10
