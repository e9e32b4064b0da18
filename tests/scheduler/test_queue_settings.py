"""Queue objects and scenario queues map to the same scheduler settings."""

from __future__ import annotations

import pytest

from gpufleet.api.queue import Queue
from gpufleet.scheduler.queueing import QueueingStrategy
from gpufleet.scheduler.settings import queue_settings


def _queue(spec: dict[str, object]) -> Queue:
    return Queue.model_validate({"metadata": {"name": "team-a"}, "spec": spec})


def test_queue_kind_carries_strategy_user_limit_and_threshold() -> None:
    queue = _queue(
        {
            "queueingStrategy": "StrictFIFO",
            "userGpuLimit": 2.5,
            "preemption": {"borrowWithinCohort": "LowerPriority", "maxPriorityThreshold": 100},
        }
    )
    settings = queue_settings(queue.name, queue.spec)
    assert settings.strategy is QueueingStrategy.STRICT_FIFO
    assert settings.user_gpu_limit == 2500
    assert settings.preemption.max_priority_threshold == 100
    assert settings.preemption.borrow_within_cohort == "LowerPriority"


def test_queue_defaults_are_best_effort_without_limits() -> None:
    settings = queue_settings("q", _queue({}).spec)
    assert settings.strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert settings.user_gpu_limit is None
    assert settings.preemption.max_priority_threshold is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"queueingStrategy": "Fifo"}, "queueingStrategy"),
        ({"userGpuLimit": -1}, "userGpuLimit"),
        ({"preemption": {"maxPriorityThreshold": 5}}, "maxPriorityThreshold"),
    ],
)
def test_bad_queue_fields_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(Exception) as caught:
        _queue(spec)
    assert field in str(caught.value)
