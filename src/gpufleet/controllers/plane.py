"""The embedded control plane's controllers, built and wired in one call.

    manager = build_manager(store)                  # all controllers, scheduling first
    runtime = Runtime(store, clock=clock, participants=[twin, manager])

Scheduling runs first in each round so that the other controllers see its admissions in the same
round (the pool autoscaler must not grow a pool for a workload that was just placed).
"""

from __future__ import annotations

from gpufleet.controllers.health import HealthController
from gpufleet.controllers.inference import AutoscalerConfig, InferenceServiceController
from gpufleet.controllers.manager import Controller, ControllerManager
from gpufleet.controllers.pools import STATUS_PERIOD, PoolController
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.training import TrainingJobController
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.store.protocol import Store


def build_manager(
    store: Store,
    *,
    config: SchedulerConfig | None = None,
    autoscaler: AutoscalerConfig | None = None,
    pool_status_seconds: float = STATUS_PERIOD,
    pool_write_seconds: float = 0.0,
    queue_status_seconds: float = 0.0,
    reason_refresh_seconds: float = 0.0,
    metrics: bool = True,
) -> ControllerManager:
    """`pool_status_seconds`: how often an unchanged pool's status (idle GPU-hours) is brought up to
    date; the job simulator, whose pools change with every pod, looks less often.
    `pool_write_seconds`: the least time between two writes of a pool's status (0: once per instant
    it changed), kept exact in the controller meanwhile; the job simulator, where nothing reads it,
    writes it at most hourly.
    `queue_status_seconds`: the least time between two writes of queue status (0: after every
    change); the job simulator, where nothing reads it, writes it at most hourly.
    `reason_refresh_seconds`: the least time between two passes that write pending reasons whose
    numbers alone changed (0: every pass); the job simulator refreshes them hourly.
    `metrics`: whether the controllers keep the process's Prometheus series of each decision and
    each TrainingJob; the job simulator's do not (its process serves no metrics, and its report
    measures every job itself)."""
    controllers: list[Controller] = [
        SchedulingController(
            store,
            config=config,
            queue_status_seconds=queue_status_seconds,
            reason_refresh_seconds=reason_refresh_seconds,
            export_metrics=metrics,
        ),
        HealthController(store),
        TrainingJobController(store, export_metrics=metrics),
        PoolController(store, status_period=pool_status_seconds, write_period=pool_write_seconds),
        InferenceServiceController(store, config=autoscaler),
    ]
    return ControllerManager(store, controllers)
