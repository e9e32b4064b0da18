"""`apply_many`: a batch of applies is one transaction, whole or not at all, in consecutive versions."""

from __future__ import annotations

import threading

import pytest

from gpufleet.api import GPUPool, TrainingJob
from gpufleet.api.errors import ValidationError
from gpufleet.store import SqliteStore

from .conftest import job, pool


def test_a_batch_creates_and_updates_in_consecutive_versions(store: SqliteStore) -> None:
    store.create(job("old", replicas=1))
    start = int(store.resource_version)
    results = store.apply_many([job("new"), job("old", replicas=3), pool("h100")])
    assert [r.name for r in results] == ["new", "old", "h100"]
    assert isinstance(results[0], TrainingJob) and isinstance(results[2], GPUPool)
    assert [int(r.metadata.resource_version or 0) for r in results] == [start + 1, start + 2, start + 3]
    assert store.get(TrainingJob, "old", "team-a").spec.replicas == 3
    events = store.events_since(start)
    assert [(e.type, e.object.name, e.resource_version) for e in events] == [
        ("ADDED", "new", start + 1),
        ("MODIFIED", "old", start + 2),
        ("ADDED", "h100", start + 3),
    ]


def test_unchanged_objects_of_a_batch_take_no_version(store: SqliteStore) -> None:
    store.apply_many([job("a"), job("b")])
    head = store.resource_version
    again = store.apply_many([job("a"), job("b")])
    assert store.resource_version == head and store.events_since(head) == []
    assert [r.metadata.resource_version for r in again] == ["1", "2"]


def test_an_error_part_way_writes_nothing(store: SqliteStore) -> None:
    store.create(job("kept", replicas=1))
    head = store.resource_version
    bad = pool("wrong")
    bad.metadata.namespace = "team-a"  # a cluster-wide kind in a namespace: refused inside the batch
    with pytest.raises(ValidationError, match="cluster-wide"):
        store.apply_many([job("first"), job("kept", replicas=5), bad])
    assert store.resource_version == head
    assert store.events_since(head) == []
    assert [j.name for j in store.list(TrainingJob)] == ["kept"]
    assert store.get(TrainingJob, "kept", "team-a").spec.replicas == 1
    # The store goes on normally after the rolled-back batch, from the same version.
    assert store.create(job("next")).metadata.resource_version == str(int(head) + 1)


def test_an_invalid_object_is_refused_before_the_batch_starts(store: SqliteStore) -> None:
    broken = job("broken")
    broken.spec.replicas = -1  # models do not validate assignments; the store checks again
    with pytest.raises(ValidationError, match=r"spec\.replicas"):
        store.apply_many([job("fine"), broken])
    assert store.resource_version == "0" and len(store.list(TrainingJob)) == 0


def test_a_watcher_sees_a_batch_whole_and_without_interleaved_writes(store: SqliteStore) -> None:
    """Writers from other threads never land between the versions of a batch."""
    size, batches = 40, 5
    stop = threading.Event()

    def other_writer() -> None:
        index = 0
        while not stop.is_set():
            store.apply(job(f"other-{index % 7}", "team-b", replicas=1 + index % 3))
            index += 1

    thread = threading.Thread(target=other_writer)
    thread.start()
    try:
        for batch in range(batches):
            store.apply_many([job(f"b{batch}-{i}") for i in range(size)])
    finally:
        stop.set()
        thread.join(timeout=10)
    by_batch: dict[str, list[int]] = {}
    for event in store.events_since(0, namespace="team-a"):
        by_batch.setdefault(event.object.name.split("-")[0], []).append(event.resource_version)
    assert len(by_batch) == batches
    for versions in by_batch.values():
        assert versions == list(range(versions[0], versions[0] + size))
