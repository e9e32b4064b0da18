"""Queue settings from a Queue object's spec (or a scenario's queue): one translation for every world."""

from __future__ import annotations

from gpufleet.api.queue import QueueSpec
from gpufleet.api.scenario import ScenarioQueue
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueingStrategy, QueueSettings


def queue_settings(name: str, spec: QueueSpec | ScenarioQueue) -> QueueSettings:
    """What the scheduler needs of a queue besides its quota, with GPU amounts in milli-GPU."""
    p = spec.preemption
    limit = spec.user_gpu_limit
    return QueueSettings(
        name=name,
        fair_share_weight=spec.fair_share_weight,
        preemption=PreemptionPolicy(
            p.within_queue, p.reclaim_within_cohort, p.borrow_within_cohort, p.max_priority_threshold
        ),
        min_runtime_seconds=spec.min_runtime_seconds,
        strategy=QueueingStrategy(spec.queueing_strategy),
        user_gpu_limit=None if limit is None else round(limit * 1000),
    )
