"""Queue settings from a Queue object's spec (or a scenario's queue): one translation for every world.

The spec is read through the protocols below rather than by importing the API kinds: those carry object
metadata (timestamps), and the scheduling core reads no clock, not even by import.
"""

from __future__ import annotations

from typing import Protocol

from gpufleet.scheduler.attained import LasSettings
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueingStrategy, QueueSettings


class PreemptionSpec(Protocol):
    """What is read of a Queue's `spec.preemption` (api.queue.QueuePreemption)."""

    @property
    def within_queue(self) -> str: ...
    @property
    def reclaim_within_cohort(self) -> str: ...
    @property
    def borrow_within_cohort(self) -> str: ...
    @property
    def max_priority_threshold(self) -> int | None: ...


class LasSpec(Protocol):
    """What is read of a Queue's `spec.leastAttainedService` (api.queue.LeastAttainedService)."""

    @property
    def thresholds_gpu_hours(self) -> list[float]: ...
    @property
    def promote_factor(self) -> float | None: ...


class QueueSpecLike(Protocol):
    """What is read of a Queue's spec (api.queue.QueueSpec) or a scenario queue (api.scenario)."""

    @property
    def preemption(self) -> PreemptionSpec: ...
    @property
    def fair_share_weight(self) -> float: ...
    @property
    def min_runtime_seconds(self) -> float: ...
    @property
    def queueing_strategy(self) -> str: ...
    @property
    def user_gpu_limit(self) -> float | None: ...
    @property
    def least_attained_service(self) -> LasSpec: ...


def queue_settings(name: str, spec: QueueSpecLike) -> QueueSettings:
    """What the scheduler needs of a queue besides its quota, with GPU amounts in milli-GPU."""
    p = spec.preemption
    limit = spec.user_gpu_limit
    las = spec.least_attained_service
    return QueueSettings(
        name=name,
        fair_share_weight=spec.fair_share_weight,
        preemption=PreemptionPolicy(
            p.within_queue, p.reclaim_within_cohort, p.borrow_within_cohort, p.max_priority_threshold
        ),
        min_runtime_seconds=spec.min_runtime_seconds,
        strategy=QueueingStrategy(spec.queueing_strategy),
        user_gpu_limit=None if limit is None else round(limit * 1000),
        las=LasSettings(
            thresholds=tuple(h * 3600.0 for h in las.thresholds_gpu_hours), promote_factor=las.promote_factor
        ),
    )
