"""The Store's Kubernetes semantics: versions, conflicts, status, finalizers, selectors, watches."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from gpufleet.api import (
    ApiModel,
    Condition,
    GPUPool,
    ObjectMeta,
    ObjectStatus,
    Resource,
    TrainingJob,
    register_kind,
)
from gpufleet.api.errors import ConflictError, GoneError, NotFoundError, ValidationError
from gpufleet.api.kinds import unregister_kind
from gpufleet.store import MemoryStore, SqliteStore

from .conftest import EmbeddedStore, job, pool


def test_create_fills_in_metadata_and_get_returns_a_copy(store: EmbeddedStore) -> None:
    created = store.create(job("llm"))
    assert created.metadata.uid and created.metadata.generation == 1
    assert created.metadata.resource_version == "1" and created.metadata.creation_timestamp is not None
    got = store.get(TrainingJob, "llm", "team-a")
    assert got == created
    got.spec.replicas = 99  # callers hold copies; the store is unchanged
    assert store.get(TrainingJob, "llm", "team-a").spec.replicas == 2


def test_create_twice_is_a_conflict_and_get_of_nothing_is_not_found(store: EmbeddedStore) -> None:
    store.create(job("llm"))
    with pytest.raises(ConflictError, match="TrainingJob team-a/llm: already exists"):
        store.create(job("llm"))
    with pytest.raises(NotFoundError, match="TrainingJob team-a/other: not found"):
        store.get("TrainingJob", "other", "team-a")
    assert store.resource_version == "1"  # the failed create wrote nothing


def test_create_ignores_status_and_refuses_a_resource_version(store: EmbeddedStore) -> None:
    submitted = job("llm")
    submitted.status.phase = "Running"
    assert store.create(submitted).status.phase == "Pending"
    again = job("llm2")
    again.metadata.resource_version = "5"
    with pytest.raises(ValidationError, match=r"field metadata\.resourceVersion"):
        store.create(again)


def test_cluster_wide_and_namespaced_kinds(store: EmbeddedStore) -> None:
    store.create(pool("h100"))
    store.create(job("llm", "default"))
    assert store.get(GPUPool, "h100").metadata.namespace is None
    assert store.get(TrainingJob, "llm").metadata.namespace == "default"
    with pytest.raises(ValidationError, match="cluster-wide"):
        store.get(GPUPool, "h100", "team-a")


def test_stale_update_is_a_conflict_and_changes_nothing(store: EmbeddedStore) -> None:
    first = store.create(job("llm"))
    second = first.model_copy(deep=True)
    first.spec.replicas = 3
    updated = store.update(first)
    assert updated.metadata.generation == 2 and int(updated.metadata.resource_version or 0) > 1
    second.spec.replicas = 4
    with pytest.raises(ConflictError, match=r"TrainingJob team-a/llm: field metadata\.resourceVersion"):
        store.update(second)
    assert store.get(TrainingJob, "llm", "team-a").spec.replicas == 3


def test_generation_moves_on_spec_change_only(store: EmbeddedStore) -> None:
    obj = store.create(job("llm"))
    obj.metadata.labels = {"team": "a"}
    labelled = store.update(obj)
    assert labelled.metadata.generation == 1 and labelled.metadata.labels == {"team": "a"}
    labelled.status.phase = "Running"
    running = store.update_status(labelled)
    assert running.metadata.generation == 1 and running.status.phase == "Running"
    running.spec.replicas = 5
    assert store.update(running).metadata.generation == 2


def test_update_keeps_status_and_update_status_keeps_spec(store: EmbeddedStore) -> None:
    obj = store.create(job("llm"))
    obj.status.phase = "Admitted"
    obj.spec.replicas = 7
    after_status = store.update_status(obj)
    assert after_status.status.phase == "Admitted" and after_status.spec.replicas == 2
    after_status.status.phase = "Failed"
    after_status.spec.replicas = 3
    after_update = store.update(after_status)
    assert after_update.status.phase == "Admitted" and after_update.spec.replicas == 3


def test_a_write_that_changes_nothing_is_not_a_write(store: EmbeddedStore) -> None:
    obj = store.create(job("llm"))
    again = store.update(obj)
    assert again.metadata.resource_version == obj.metadata.resource_version
    assert store.events_since(1) == []


def test_update_without_resource_version_is_unconditional(store: EmbeddedStore) -> None:
    store.create(job("llm"))
    blind = job("llm", replicas=6)
    assert store.update(blind).spec.replicas == 6


def test_invalid_objects_are_refused_before_anything_is_written(store: EmbeddedStore) -> None:
    obj = store.create(job("llm"))
    obj.spec.replicas = -3  # attribute assignment is not validated by the model
    with pytest.raises(ValidationError, match=r"TrainingJob team-a/llm: field spec\.replicas: must be >= 1"):
        store.update(obj)
    assert store.get(TrainingJob, "llm", "team-a").spec.replicas == 2


def test_delete_without_finalizers_removes_at_once(store: EmbeddedStore) -> None:
    store.create(job("llm"))
    assert store.delete(TrainingJob, "llm", "team-a") is None
    with pytest.raises(NotFoundError):
        store.get(TrainingJob, "llm", "team-a")
    with pytest.raises(NotFoundError):
        store.delete(TrainingJob, "llm", "team-a")


def test_finalizers_hold_a_deleted_object_until_the_last_goes(store: EmbeddedStore) -> None:
    obj = job("llm")
    obj.metadata.finalizers = ["gpufleet.io/pods", "gpufleet.io/quota"]
    store.create(obj)
    held = store.delete(TrainingJob, "llm", "team-a")
    assert held is not None and held.metadata.deletion_timestamp is not None
    assert store.delete(TrainingJob, "llm", "team-a") == held  # deleting again changes nothing
    held.metadata.finalizers = ["gpufleet.io/pods", "gpufleet.io/quota", "example.com/new"]
    with pytest.raises(ValidationError, match="cannot add finalizers"):
        store.update(held)
    held.metadata.finalizers = ["gpufleet.io/quota"]
    still = store.update(held)
    assert store.get(TrainingJob, "llm", "team-a").metadata.finalizers == ["gpufleet.io/quota"]
    still.metadata.finalizers = []
    store.update(still)
    with pytest.raises(NotFoundError):
        store.get(TrainingJob, "llm", "team-a")
    assert [event.type for event in store.events_since(0)] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


def test_delete_with_a_stale_resource_version_is_a_conflict(store: EmbeddedStore) -> None:
    obj = store.create(job("llm"))
    obj.spec.replicas = 3
    store.update(obj)
    with pytest.raises(ConflictError):
        store.delete(TrainingJob, "llm", "team-a", resource_version="1")


def test_apply_creates_then_replaces_spec_whatever_the_version(store: EmbeddedStore) -> None:
    created = store.apply(job("llm"))
    assert created.metadata.generation == 1
    store.update_status(
        created.model_copy(update={"status": created.status.model_copy(update={"phase": "Running"})})
    )
    applied = store.apply(job("llm", replicas=4))
    assert applied.spec.replicas == 4 and applied.metadata.generation == 2
    assert applied.status.phase == "Running"


def test_list_by_namespace_and_label_selector(store: EmbeddedStore) -> None:
    store.create(job("a", "team-a", labels={"app": "llm", "tier": "gold"}))
    store.create(job("b", "team-a", labels={"app": "vision"}))
    store.create(job("c", "team-b", labels={"app": "llm"}))
    everything = store.list(TrainingJob)
    assert [o.key for o in everything] == ["team-a/a", "team-a/b", "team-b/c"]
    assert everything.resource_version == "3"
    assert [o.name for o in store.list(TrainingJob, namespace="team-a")] == ["a", "b"]
    assert [o.name for o in store.list(TrainingJob, label_selector="app=llm")] == ["a", "c"]
    assert [o.name for o in store.list(TrainingJob, label_selector="app in (llm),!tier")] == ["c"]
    assert [o.name for o in store.list("TrainingJob", label_selector={"app": "vision"})] == ["b"]
    assert len(store.list(GPUPool)) == 0


def test_label_selectors_on_prefixed_keys_select_exactly_the_matching_objects(store: EmbeddedStore) -> None:
    """Equality and set clauses are also narrowed in SQL (owner lists read only their objects); what
    a selector returns stays what its Kubernetes semantics say, for prefixed keys too."""
    store.create(job("a", "ns", labels={"gpufleet.io/job": "x", "example.com/tier": "gold"}))
    store.create(job("b", "ns", labels={"gpufleet.io/job": "y"}))
    store.create(job("c", "ns", labels={"gpufleet.io/job": "x-1"}))
    store.create(job("d", "ns"))

    def names(selector: str | dict[str, str]) -> list[str]:
        return [o.name for o in store.list(TrainingJob, namespace="ns", label_selector=selector)]

    assert names({"gpufleet.io/job": "x"}) == ["a"]
    assert names("gpufleet.io/job in (x, y)") == ["a", "b"]
    assert names("gpufleet.io/job in (x,y),example.com/tier!=gold") == ["b"]
    assert names("gpufleet.io/job!=x") == ["b", "c", "d"]
    assert names("gpufleet.io/job==x-1") == ["c"]
    assert names("example.com/tier") == ["a"]
    assert names({"gpufleet.io/job": "z"}) == []
    assert names({"gpufleet.io/job": "x", "example.com/tier": "gold"}) == ["a"]


def test_resource_versions_increase_across_kinds(store: EmbeddedStore) -> None:
    versions = [
        store.create(pool("p")).metadata.resource_version,
        store.create(job("j")).metadata.resource_version,
        store.create(pool("q")).metadata.resource_version,
    ]
    assert [int(v or 0) for v in versions] == [1, 2, 3]


def test_events_since_in_order_filtered_and_resumable(store: EmbeddedStore) -> None:
    store.create(pool("p"))
    obj = store.create(job("j"))
    obj.spec.replicas = 5
    store.update(obj)
    store.delete(TrainingJob, "j", "team-a")
    events = store.events_since(0)
    assert [(e.type, e.object.kind, e.resource_version) for e in events] == [
        ("ADDED", "GPUPool", 1),
        ("ADDED", "TrainingJob", 2),
        ("MODIFIED", "TrainingJob", 3),
        ("DELETED", "TrainingJob", 4),
    ]
    assert events[2].object.spec.replicas == 5  # type: ignore[attr-defined]
    assert [e.resource_version for e in store.events_since(2, kinds=["TrainingJob"])] == [3, 4]
    assert store.events_since(1, kinds=["GPUPool"]) == []
    assert [e.resource_version for e in store.events_since("0", limit=2)] == [1, 2]


def test_watch_from_a_compacted_version_is_gone(store: EmbeddedStore) -> None:
    for index in range(10):
        store.create(pool(f"p{index}"))
    assert store.compact(keep=3) == 7
    assert [e.resource_version for e in store.events_since(7)] == [8, 9, 10]
    with pytest.raises(GoneError, match="resourceVersion 6 is too old"):
        store.events_since(6)
    with pytest.raises(GoneError):
        next(iter(store.watch(since=2, timeout=0.1)))


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_retention_compacts_automatically(tmp_path: Path, kind: str) -> None:
    opened = (
        MemoryStore(event_retention=10)
        if kind == "memory"
        else SqliteStore.open(tmp_path, synchronous="OFF", event_retention=10)
    )
    with opened as small:
        for index in range(300):
            small.create(pool(f"p{index}"))
        with pytest.raises(GoneError):
            small.events_since(0)
        assert len(small.list(GPUPool)) == 300


WAKE_ONLY_SECONDS = 3600.0
"""Far beyond any test: a wait this long ends by a wake-up or not at all."""


class WaitWatchingStore(SqliteStore):
    """Says when a watch starts waiting for a change. With `wake_only` it then waits for a wake-up alone,
    not for the poll period after which a watch looks again anyway, so only a wake-up can end the wait."""

    def __init__(self, path: Path, *, wake_only: bool = False) -> None:
        super().__init__(path, synchronous="NORMAL")
        self.waiting = threading.Event()
        self.wake_only = wake_only

    def _wait_for_change(self, after: int, timeout: float, stop: Callable[[], bool]) -> None:
        self.waiting.set()
        super()._wait_for_change(after, WAKE_ONLY_SECONDS if self.wake_only else timeout, stop)


class WaitWatchingMemoryStore(MemoryStore):
    """`WaitWatchingStore` in memory."""

    def __init__(self, *, wake_only: bool = False) -> None:
        super().__init__()
        self.waiting = threading.Event()
        self.wake_only = wake_only

    def _wait_for_change(self, after: int, timeout: float, stop: Callable[[], bool]) -> None:
        self.waiting.set()
        super()._wait_for_change(after, WAKE_ONLY_SECONDS if self.wake_only else timeout, stop)


@pytest.fixture(params=["sqlite", "memory"])
def watched(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[WaitWatchingStore | WaitWatchingMemoryStore]:
    opened = (
        WaitWatchingMemoryStore() if request.param == "memory" else WaitWatchingStore(tmp_path / "watched.db")
    )
    yield opened
    opened.close()


def test_watch_blocks_until_events_arrive_and_ends_at_its_timeout(
    watched: WaitWatchingStore | WaitWatchingMemoryStore,
) -> None:
    store = watched
    since = store.resource_version
    received = []

    def consume() -> None:
        with store.watch(kinds=["TrainingJob"], since=since, timeout=3.0) as watch:
            for event in watch:
                received.append((event.type, event.object.name))
                if len(received) == 2:
                    return

    reader = threading.Thread(target=consume)
    reader.start()
    assert store.waiting.wait(10), "the watch never waited for a change"
    store.create(pool("ignored"))
    store.create(job("a"))
    store.delete(TrainingJob, "a", "team-a")
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert received == [("ADDED", "a"), ("DELETED", "a")]
    started = time.monotonic()
    assert list(store.watch(since=store.resource_version, timeout=0.2)) == []
    assert time.monotonic() - started >= 0.2  # not before its timeout; that it ends at all is the rest


def test_watch_resource_version_resumes_without_loss(store: EmbeddedStore) -> None:
    store.create(job("a"))
    watch = store.watch(since=0, timeout=0.05)
    first = next(watch)
    resume_at = watch.resource_version
    store.create(job("b"))
    store.create(job("c"))
    assert first.object.name == "a" and resume_at == "1"
    assert [e.object.name for e in store.watch(since=resume_at, timeout=0.05)] == ["b", "c"]


def test_close_wakes_a_blocked_watch(watched: WaitWatchingStore | WaitWatchingMemoryStore) -> None:
    watched.wake_only = True
    watch = watched.watch(timeout=None)
    results: list[object] = []

    def read() -> None:
        results.extend(watch)
        results.append("ended")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert watched.waiting.wait(10), "the watch never waited for a change"
    watch.close()
    reader.join(timeout=10)
    assert not reader.is_alive() and results == ["ended"]


def test_concurrent_writers_from_threads_never_lose_a_write(store: EmbeddedStore) -> None:
    store.create(job("counter"))
    conflicts = 0
    lock = threading.Lock()

    def bump(times: int) -> None:
        nonlocal conflicts
        done = 0
        while done < times:
            current = store.get(TrainingJob, "counter", "team-a")
            current.status.restarts += 1
            try:
                store.update_status(current)
                done += 1
            except ConflictError:
                with lock:
                    conflicts += 1

    threads = [threading.Thread(target=bump, args=(25,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get(TrainingJob, "counter", "team-a").status.restarts == 100
    versions = [e.resource_version for e in store.events_since(0)]
    assert versions == sorted(set(versions)) and len(versions) == 101


def test_status_conditions_round_trip_through_the_store(sqlite_store: SqliteStore) -> None:
    store = sqlite_store
    obj = store.create(job("llm"))
    obj.status.conditions = [Condition(type="Admitted", status="True", reason="QuotaReserved")]
    stored = store.update_status(obj)
    reopened = SqliteStore(store._path)
    try:
        assert reopened.get(TrainingJob, "llm", "team-a").status.conditions == stored.status.conditions
    finally:
        reopened.close()


def test_unregistered_kinds_are_refused(store: EmbeddedStore) -> None:
    with pytest.raises(ValidationError, match="kind Pizza is not registered"):
        store.list("Pizza")


class WorkloadSpec(ApiModel):
    queue: str
    pod_count: int = Field(ge=1)


class Workload(Resource):
    """A kind another package would define: the store keeps it without knowing it in advance."""

    api_version: Literal["scheduling.gpufleet.io/v1alpha1"] = "scheduling.gpufleet.io/v1alpha1"
    kind: Literal["TestWorkload"] = "TestWorkload"
    spec: WorkloadSpec
    status: ObjectStatus = Field(default_factory=ObjectStatus)


@pytest.fixture
def outside_workload_kind() -> Iterator[None]:
    register_kind(Workload, plural="testworkloads", crd=False)
    yield
    unregister_kind("TestWorkload")


@pytest.mark.usefixtures("outside_workload_kind")
def test_kinds_registered_by_other_packages_are_stored(store: EmbeddedStore) -> None:
    created = store.create(Workload(metadata=ObjectMeta(name="w"), spec=WorkloadSpec(queue="q", pod_count=2)))
    assert store.get(Workload, "w").spec.pod_count == 2 and created.metadata.namespace == "default"
    assert [e.object.kind for e in store.events_since(0, kinds=["TestWorkload"])] == ["TestWorkload"]
