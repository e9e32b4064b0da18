"""A kind-filtered reader's cursor passes the entries of other kinds it looked at, where the store can
say how far a read went (the in-memory store), and stops at its last event elsewhere; either way it
gets every event of its kinds once, in order."""

from __future__ import annotations

from pathlib import Path

from gpufleet.store import MemoryStore, SqliteStore
from gpufleet.store.eventpage import EventPages
from gpufleet.store.protocol import Store

from .conftest import job, pool


def _write(store: Store) -> None:
    store.create(pool("a"))  # version 1: a GPUPool, of the kind read
    for n in range(5):
        store.create(job(f"j{n}"))  # versions 2-6: TrainingJobs, of another kind


def test_the_in_memory_store_moves_the_cursor_past_what_the_read_looked_at() -> None:
    store = MemoryStore()
    _write(store)
    pages = EventPages(store)
    events, cursor = pages.read("0", kinds=["GPUPool"], limit=100)
    assert [e.object.name for e in events] == ["a"] and cursor == "6"
    # Cut by the limit: the cursor is the last event's, so nothing of the kinds read is skipped.
    events, cursor = pages.read("0", kinds=["TrainingJob"], limit=2)
    assert [e.resource_version for e in events] == [2, 3] and cursor == "3"
    events, cursor = pages.read(cursor, kinds=["TrainingJob"], limit=2)
    assert [e.resource_version for e in events] == [4, 5] and cursor == "5"
    store.create(pool("b"))
    events, cursor = pages.read("6", kinds=["GPUPool"], limit=100)
    assert [e.object.name for e in events] == ["b"] and cursor == "7"


def test_another_store_moves_the_cursor_to_its_last_event(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path) as store:
        _write(store)
        pages = EventPages(store)
        events, cursor = pages.read("0", kinds=["GPUPool"], limit=100)
        assert [e.object.name for e in events] == ["a"] and cursor == "1"
        events, cursor = pages.read(cursor, kinds=["GPUPool"], limit=100)
        assert events == [] and cursor == "1"
