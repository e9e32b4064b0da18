"""A workload that waits gets one FailedScheduling event per reason, on its owner, not one per cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.runtime import Event
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .test_scheduling import ready_node, run, workload


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)


def _failed_scheduling(store: SqliteStore) -> list[Event]:
    return [e for e in store.list(Event) if e.spec.reason == "FailedScheduling"]


def test_a_pending_workload_gets_one_event_when_its_reason_appears(store: SqliteStore) -> None:
    ready_node(store, "n1", gpus=8)
    workload(store, "big", gpus=16)
    controller = SchedulingController(store, resync_seconds=1.0)
    for second in range(5):
        run(store, controller, now=float(second * 10))  # several periodic cycles, the same reason
    (event,) = _failed_scheduling(store)
    assert (event.spec.involved_kind, event.spec.involved_name) == ("TrainingJob", "big")
    assert event.spec.type == "Warning" and event.spec.message.startswith("NoFit: ")
    # A rebuild (e.g. a restart) sees the reason already written: no second event.
    controller.needs_rebuild = True
    run(store, controller, now=100.0)
    assert len(_failed_scheduling(store)) == 1
