"""A reconcile that raises is one object's problem: the manager logs it, goes on with the other
objects and controllers, and looks at the object again later (as controller-runtime does)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import Queue, QueueSpec
from gpufleet.controllers.manager import ControllerManager, Key, Reconciler
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock


class Picky(Reconciler):
    """Reconciles Queues; the one named `bad` meets a bug until it is fixed."""

    kinds = ("Queue",)
    primary = "Queue"

    def __init__(self, store: SqliteStore, name: str) -> None:
        super().__init__(store)
        self.name = name
        self.fixed = False
        self.seen: list[tuple[str, float]] = []

    def reconcile(self, key: Key, now: float) -> float | None:
        if key[1] == "bad" and not self.fixed:
            raise KeyError("a bug")
        self.seen.append((key[1], now))
        return None


@pytest.mark.contained_failures
def test_a_failing_reconcile_stops_neither_other_objects_nor_other_controllers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)
    for name in ("a-first", "bad", "z-last"):
        store.create(Queue(metadata=ObjectMeta(name=name), spec=QueueSpec()))
    first, second = Picky(store, "first"), Picky(store, "second")
    manager = ControllerManager(store, [first, second])
    with caplog.at_level(logging.ERROR, logger="gpufleet.controllers.failures"):
        wake = manager.step(0.0)
    assert [name for name, _ in first.seen] == ["a-first", "z-last"]
    assert [name for name, _ in second.seen] == ["a-first", "z-last"]
    assert manager.contained_failures == 2
    assert "first: /bad: reconcile failed" in caplog.text and "KeyError: 'a bug'" in caplog.text
    # Looked at again after the retry delay, not in a tight loop.
    assert wake == Reconciler.retry_seconds
    first.fixed = second.fixed = True
    manager.step(1.0)
    assert "bad" not in [name for name, _ in first.seen]
    retried = Reconciler.retry_seconds
    manager.step(retried)
    assert ("bad", retried) in first.seen and ("bad", retried) in second.seen
