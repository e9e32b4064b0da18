"""Readers of the event log each see every event with the object as it was at that version, whether
the event was parsed for them or for a reader before them (the store keeps the latest parsed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.store import SqliteStore
from gpufleet.store import sqlite as sqlite_store

from .conftest import job


def _replicas(store: SqliteStore, since: int, **filters: str) -> list[tuple[str, int]]:
    kinds = [filters["kind"]] if "kind" in filters else None
    events = store.events_since(since, kinds=kinds, namespace=filters.get("namespace"))
    return [(e.type, e.object.spec.replicas) for e in events]  # type: ignore[attr-defined]


def test_readers_after_the_first_see_each_version_as_written(store: SqliteStore) -> None:
    start = int(store.resource_version)
    created = store.create(job("a", replicas=1))
    first = _replicas(store, start)
    store.update(created.model_copy(update={"spec": created.spec.model_copy(update={"replicas": 3})}))
    store.delete("TrainingJob", "a", "team-a")
    assert first == [("ADDED", 1)]
    expected = [("ADDED", 1), ("MODIFIED", 3), ("DELETED", 3)]
    assert _replicas(store, start) == expected
    assert _replicas(store, start, kind="TrainingJob", namespace="team-a") == expected
    assert _replicas(store, start, namespace="elsewhere") == []


def test_events_past_the_parsed_ones_are_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "PARSED_EVENTS", 2)
    with SqliteStore.open(tmp_path, synchronous="OFF") as store:
        start = int(store.resource_version)
        for n in range(1, 6):
            store.create(job(f"j{n}", replicas=n))
        assert _replicas(store, start) == [("ADDED", n) for n in range(1, 6)]
        assert _replicas(store, start) == [("ADDED", n) for n in range(1, 6)]
        assert len(store._parsed) == 2
