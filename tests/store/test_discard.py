"""A store given `discard_kinds` (the simulator's, for Events) validates such an object on create as it
would store it, refuses a bad one the same way, returns it as created, and keeps nothing of it: no
object, no event in the log, no new version. Other kinds are stored as ever."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.runtime import Event
from gpufleet.controllers.events import Announcement, about, record_all
from gpufleet.store import MemoryStore, SqliteStore

from .conftest import EmbeddedStore, job


@pytest.fixture(params=["sqlite", "memory"])
def dropping(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedStore]:
    """Each embedded store, told to drop Events."""
    if request.param == "memory":
        with MemoryStore(discard_kinds=["Event"]) as in_memory:
            yield in_memory
        return
    with SqliteStore.open(tmp_path, synchronous="NORMAL", discard_kinds=["Event"]) as opened:
        yield opened


def _event(reason: str = "Admitted") -> Event:
    return about("TrainingJob", "llm", "team-a", reason=reason, message="admitted", now=1_700_000_000.0)


def test_a_dropped_event_is_returned_as_created_and_kept_nowhere(dropping: EmbeddedStore) -> None:
    stored = dropping.create(job("llm"))
    version = dropping.resource_version
    created = dropping.create(_event())
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert created.metadata.generation == 1 and created.spec.reason == "Admitted"
    assert dropping.resource_version == version  # no version was taken
    with pytest.raises(NotFoundError):
        dropping.get(Event, created.metadata.name, "team-a")
    assert dropping.list(Event).items == []
    assert [e.object.kind for e in dropping.events_since(0)] == ["TrainingJob"]  # only the job's ADDED
    assert dropping.writes_by_this_thread() == 1  # a settle round that only recorded Events is quiet
    assert dropping.get(type(stored), "llm", "team-a").metadata.uid == stored.metadata.uid


def test_dropped_events_are_counted_by_reason(dropping: EmbeddedStore) -> None:
    for reason in ["Admitted", "Preempted", "Admitted"]:
        dropping.create(_event(reason))
    assert dropping.discarded == {("Event", "Admitted"): 2, ("Event", "Preempted"): 1}


def test_a_bad_event_is_refused_as_a_stored_create_would_be(dropping: EmbeddedStore) -> None:
    with_version = _event()
    with_version.metadata.resource_version = "7"
    with pytest.raises(ValidationError) as refused:
        dropping.create(with_version)
    assert refused.value.field == "metadata.resourceVersion" and "Event" in str(refused.value)

    # A value the model refuses (set around its validation, as a careless caller could) is refused
    # by the store's validation of the object it would have written, naming the field.
    bad = _event()
    object.__setattr__(bad.spec, "type", "Loud")
    with pytest.raises(ValidationError) as invalid:
        dropping.create(bad)
    assert "spec.type" in str(invalid.value)
    assert dropping.discarded == {}  # refused, not counted


def _announcement(reason: str) -> Announcement:
    return Announcement("TrainingJob", "llm", "team-a", reason, "admitted", 1_700_000_000.0)


def test_announced_events_are_counted_as_their_creates_would_be(dropping: EmbeddedStore) -> None:
    version = dropping.resource_version
    record_all(dropping, [_announcement(r) for r in ["Admitted", "Running", "Admitted"]])
    dropping.create(_event("Running"))
    assert dropping.discarded == {("Event", "Admitted"): 2, ("Event", "Running"): 2}
    assert dropping.resource_version == version and dropping.writes_by_this_thread() == 0


def test_announced_events_are_stored_whole_by_a_store_that_keeps_them(store: EmbeddedStore) -> None:
    record_all(store, [_announcement("Admitted"), _announcement("Running")])
    kept = sorted(store.list(Event).items, key=lambda e: e.spec.reason)
    assert [(e.spec.reason, e.spec.involved_name, e.namespace) for e in kept] == [
        ("Admitted", "llm", "team-a"),
        ("Running", "llm", "team-a"),
    ]
    assert kept[0].spec.time.timestamp() == 1_700_000_000.0 and store.discarded == {}


def test_an_unknown_kind_to_drop_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="Evnet"):
        MemoryStore(discard_kinds=["Evnet"])


def test_without_discard_kinds_events_are_stored(store: EmbeddedStore) -> None:
    created = store.create(_event())
    assert store.get(Event, created.metadata.name, "team-a").spec.reason == "Admitted"
    assert store.discarded == {}
