"""Readers of the event log each see every event with the object as it was at that version, whether
the event was parsed for them or for a reader before them (the store keeps the latest parsed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.errors import ConflictError, GoneError
from gpufleet.store import SqliteStore
from gpufleet.store import sqlite as sqlite_store

from .conftest import EmbeddedStore, job


def _replicas(store: EmbeddedStore, since: int, **filters: str) -> list[tuple[str, int]]:
    kinds = [filters["kind"]] if "kind" in filters else None
    events = store.events_since(since, kinds=kinds, namespace=filters.get("namespace"))
    return [(e.type, e.object.spec.replicas) for e in events]  # type: ignore[attr-defined]


def test_readers_after_the_first_see_each_version_as_written(store: EmbeddedStore) -> None:
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


def _names(store: EmbeddedStore, since: int, *, limit: int | None = None) -> list[str]:
    return [e.object.name for e in store.events_since(since, limit=limit)]


def test_another_connections_writes_are_read_between_this_ones(tmp_path: Path) -> None:
    # The second store is another connection to the same file (another process, in production):
    # its commits are not in this connection's in-memory tail, so this one must read them from the
    # file, before and after its own next write.
    with SqliteStore.open(tmp_path, synchronous="OFF") as ours, SqliteStore.open(tmp_path) as theirs:
        start = int(ours.resource_version)
        ours.create(job("a"))
        theirs.create(job("b"))
        assert _names(ours, start) == ["a", "b"]
        ours.create(job("c"))
        theirs.create(job("d"))
        ours.create(job("e"))
        assert _names(ours, start) == ["a", "b", "c", "d", "e"]
        assert _names(ours, start + 2) == ["c", "d", "e"]
        assert _names(theirs, start) == ["a", "b", "c", "d", "e"]
        assert _names(ours, start, limit=2) == ["a", "b"]


def test_reads_older_than_the_tail_and_after_a_rollback_come_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "TAIL_EVENTS", 2)
    with SqliteStore.open(tmp_path, synchronous="OFF") as store:
        start = int(store.resource_version)
        for n in range(1, 5):
            store.create(job(f"j{n}"))
        assert _names(store, start) == ["j1", "j2", "j3", "j4"]
        assert _names(store, start + 2) == ["j3", "j4"]
        store.apply_many([job("j5"), job("j6")])
        with pytest.raises(ConflictError):  # rolled back: no event, no version
            store.create(job("j1"))
        store.apply_many([job("j7"), job("j8")], dry_run=True)
        assert _names(store, start + 2) == ["j3", "j4", "j5", "j6"]
        store.create(job("j9"))
        assert _names(store, start + 4) == ["j5", "j6", "j9"]
        assert int(store.resource_version) == start + 7


def test_a_compacted_version_is_gone_when_read_from_memory_too(store: EmbeddedStore) -> None:
    start = int(store.resource_version)
    for n in range(1, 5):
        store.create(job(f"j{n}"))
    store.compact(keep=2)
    with pytest.raises(GoneError):
        store.events_since(start)
    assert _names(store, start + 2) == ["j3", "j4"]
