"""`apply_many` and `delete_many`: one transaction per batch, whole or not at all, in consecutive versions."""

from __future__ import annotations

import threading

import pytest

from gpufleet.api import GPUPool, TrainingJob
from gpufleet.api.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.store import ObjectRef

from .conftest import EmbeddedStore, job, pool


def test_a_batch_creates_and_updates_in_consecutive_versions(store: EmbeddedStore) -> None:
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


def test_unchanged_objects_of_a_batch_take_no_version(store: EmbeddedStore) -> None:
    store.apply_many([job("a"), job("b")])
    head = store.resource_version
    again = store.apply_many([job("a"), job("b")])
    assert store.resource_version == head and store.events_since(head) == []
    assert [r.metadata.resource_version for r in again] == ["1", "2"]


def test_an_error_part_way_writes_nothing(store: EmbeddedStore) -> None:
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


def test_an_invalid_object_is_refused_before_the_batch_starts(store: EmbeddedStore) -> None:
    broken = job("broken")
    broken.spec.replicas = -1  # models do not validate assignments; the store checks again
    with pytest.raises(ValidationError, match=r"spec\.replicas"):
        store.apply_many([job("fine"), broken])
    assert store.resource_version == "0" and len(store.list(TrainingJob)) == 0


def test_a_watcher_sees_a_batch_whole_and_without_interleaved_writes(store: EmbeddedStore) -> None:
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


# ------------------------------------------------------------------------------------ delete_many


def test_a_delete_batch_removes_every_object_in_consecutive_versions(store: EmbeddedStore) -> None:
    store.apply_many([job("a"), job("b"), pool("h100")])
    start = int(store.resource_version)
    results = store.delete_many(
        [
            ObjectRef("TrainingJob", "a", "team-a"),
            ObjectRef("GPUPool", "h100"),
            ObjectRef("TrainingJob", "b", "team-a"),
        ]
    )
    assert results == [None, None, None]
    assert [(e.type, e.object.name, e.resource_version) for e in store.events_since(start)] == [
        ("DELETED", "a", start + 1),
        ("DELETED", "h100", start + 2),
        ("DELETED", "b", start + 3),
    ]
    assert len(store.list(TrainingJob)) == 0 and len(store.list(GPUPool)) == 0


@pytest.mark.parametrize("problem", ["missing", "stale"])
def test_a_delete_batch_with_one_bad_object_deletes_none(store: EmbeddedStore, problem: str) -> None:
    store.apply_many([job("a"), job("b"), job("c")])
    head = store.resource_version
    bad = (
        ObjectRef("TrainingJob", "nope", "team-a")
        if problem == "missing"
        else ObjectRef("TrainingJob", "c", "team-a", resource_version="1")
    )
    with pytest.raises(NotFoundError if problem == "missing" else ConflictError):
        store.delete_many(
            [ObjectRef("TrainingJob", "a", "team-a"), ObjectRef("TrainingJob", "b", "team-a"), bad]
        )
    assert store.resource_version == head and store.events_since(head) == []
    assert [j.name for j in store.list(TrainingJob)] == ["a", "b", "c"]
    assert store.writes_by_this_thread() == 3  # the rolled-back deletions are not counted


def test_a_delete_batch_leaves_objects_with_finalizers_being_deleted(store: EmbeddedStore) -> None:
    held = job("held")
    held.metadata.finalizers = ["gpufleet.io/checkpoint"]
    store.apply_many([held, job("free")])
    results = store.delete_many(
        [ObjectRef("TrainingJob", "held", "team-a"), ObjectRef("TrainingJob", "free", "team-a")]
    )
    assert results[1] is None
    assert results[0] is not None and results[0].metadata.deletion_timestamp is not None
    assert [j.name for j in store.list(TrainingJob)] == ["held"]


def test_a_dry_run_returns_what_it_would_write_and_keeps_nothing(store: EmbeddedStore) -> None:
    store.create(job("a"))
    head = store.resource_version
    changed = job("a", replicas=5)
    results = store.apply_many([changed, job("b")], dry_run=True)
    assert [(r.name, r.metadata.resource_version) for r in results] == [("a", "2"), ("b", "3")]
    assert store.resource_version == head and store.events_since(head) == []
    assert [j.name for j in store.list(TrainingJob)] == ["a"]
    assert store.get(TrainingJob, "a", "team-a").spec.replicas == 2
    broken = job("c")
    broken.spec.replicas = -1
    with pytest.raises(ValidationError, match=r"spec\.replicas"):  # refused as a real apply would be
        store.apply_many([job("d"), broken], dry_run=True)
    assert store.resource_version == head
