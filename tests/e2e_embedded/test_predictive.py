"""Predictive autoscaling: with a day of history, capacity is added before the daily peak."""

from __future__ import annotations

from pathlib import Path

from gpufleet.controllers.inference import AutoscalerConfig
from gpufleet.controllers.plane import build_manager
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.config import Traffic, TwinConfig
from gpufleet.twin.driver import Runtime

from .conftest import World, make_world

DAY = 4 * 3600.0  # a short day keeps the test quick; the controller's season matches it

OBJECTS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: l4}
spec: {gpuModel: L4, gpusPerNode: 4, nodes: 6}
---
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: NAME}
spec:
  replicas: {min: 1, max: 12}
  replica: {gpus: 1}
  autoscaling: {targetRequestsPerReplica: 20, predictive: PREDICTIVE}
"""


def test_predictive_service_scales_before_the_peak(tmp_path: Path) -> None:
    config = TwinConfig(day_seconds=DAY, traffic=Traffic(base_rps=20, peak_rps=200, peak_hour=12, noise=0))
    world = make_world(tmp_path, config=config)
    world.manager = build_manager(
        world.store, autoscaler=AutoscalerConfig(season_seconds=DAY, lead_seconds=2400, bucket_seconds=300)
    )
    world.runtime = Runtime(world.store, clock=world.clock, participants=[world.twin, world.manager])
    world.apply(OBJECTS.replace("NAME", "ahead").replace("PREDICTIVE", "true"))
    world.apply(OBJECTS.replace("NAME", "react").replace("PREDICTIVE", "false").split("---")[1])
    start = world.now
    peak = start + DAY + DAY / 2  # the second day's peak (peak_hour 12 of 24 = mid-day)
    world.runtime.run_until(peak - 2400)
    ahead = world.get("InferenceService", "ahead", "default").status.desired_replicas
    react = world.get("InferenceService", "react", "default").status.desired_replicas
    assert react <= 8
    assert ahead >= 10 > react
    world.store.close()


def test_the_forecast_survives_a_restart_of_the_control_plane(tmp_path: Path) -> None:
    config = TwinConfig(day_seconds=DAY, traffic=Traffic(base_rps=20, peak_rps=200, peak_hour=12, noise=0))
    autoscaler = AutoscalerConfig(season_seconds=DAY, lead_seconds=2400, bucket_seconds=300)

    def start(clock: VirtualClock | None = None) -> World:
        world = make_world(tmp_path, config=config, clock=clock)
        world.manager = build_manager(world.store, autoscaler=autoscaler)
        world.runtime = Runtime(world.store, clock=world.clock, participants=[world.twin, world.manager])
        return world

    first = start()
    first.apply(OBJECTS.replace("NAME", "ahead").replace("PREDICTIVE", "true"))
    peak = first.now + DAY + DAY / 2
    first.runtime.run_until(first.now + DAY + 600)  # a day of history, then the process dies
    clock = first.clock
    first.store.close()

    second = start(clock)  # a new manager: nothing in memory
    second.runtime.run_until(peak - 2400)
    assert second.get("InferenceService", "ahead", "default").status.desired_replicas >= 10
    load = second.get("ServiceLoad", "ahead", "default")
    assert len(load.status.season) >= DAY / 300 - 1
    second.store.close()
