"""With `reason_refresh_seconds`, a waiting workload whose reason changed only its numbers is told at
most that often, while a new reason is told at once; without it (`gpufleet up`), at every pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue, QueueSpec
from gpufleet.api.runtime import Workload
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .test_queue_tree import submit
from .test_scheduling import ready_node


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)


def reason(store: SqliteStore, name: str) -> tuple[str, str]:
    found = store.get(Workload, name).status.pending_reason
    assert found is not None, name
    return found.type, found.message


def quota_world(store: SqliteStore, refresh: float) -> ControllerManager:
    """A queue of 8 GPUs on a node of 16: 4 used, and an 8-GPU workload over the quota."""
    ready_node(store, "n1", gpus=16)
    quotas = {"H100": FlavorQuota(nominal=8)}
    store.create(Queue(metadata=ObjectMeta(name="team"), spec=QueueSpec(quotas=quotas)))
    submit(store, "first", "team", gpus=4)
    controller = SchedulingController(store, resync_seconds=30.0, reason_refresh_seconds=refresh)
    manager = ControllerManager(store, [controller])  # one manager: a new one would rebuild the cache
    run(manager, now=0.0)
    submit(store, "big", "team", gpus=8)
    return manager


def run(manager: ControllerManager, now: float) -> None:
    for _ in range(3):
        manager.step(now)


@pytest.mark.parametrize("refresh", [0.0, 3600.0])
def test_numbers_that_move_are_told_at_most_once_per_refresh(store: SqliteStore, refresh: float) -> None:
    manager = quota_world(store, refresh)
    run(manager, now=1.0)
    kind, told = reason(store, "big")
    assert kind == "QuotaExceeded" and "used 4" in told, told  # a new reason: at once, whatever refresh
    submit(store, "second", "team", gpus=2)  # admitted: the queue now uses 6 GPUs
    run(manager, now=10.0)
    assert store.get(Workload, "second").status.phase == "Admitted"
    kind, told = reason(store, "big")
    assert kind == "QuotaExceeded"
    assert ("used 6" in told) is (refresh == 0.0), told
    run(manager, now=refresh + 60.0)  # a periodic cycle after the refresh time
    assert "used 6" in reason(store, "big")[1]


def test_a_new_reason_type_is_told_at_once_within_the_refresh(store: SqliteStore) -> None:
    manager = quota_world(store, 3600.0)
    run(manager, now=1.0)
    assert reason(store, "big")[0] == "QuotaExceeded"
    store.delete(Queue, "team")  # its queue is gone: a reason of another type
    run(manager, now=10.0)
    kind, told = reason(store, "big")
    assert kind != "QuotaExceeded" and "team" in told, (kind, told)
