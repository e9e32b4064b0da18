"""What the in-memory store adds to the protocol tests (run on both stores): nothing it hands out
shares a value with what it keeps, and events past the parsed ones are parsed again as written."""

from __future__ import annotations

import pytest

from gpufleet.api import TrainingJob
from gpufleet.store import MemoryStore
from gpufleet.store import memory as memory_store

from .conftest import job


def _image(obj: TrainingJob) -> str:
    template = obj.spec.worker.template
    assert template is not None
    image: str = template["spec"]["containers"][0]["image"]
    return image


def _change_image(obj: TrainingJob) -> None:
    template = obj.spec.worker.template
    assert template is not None
    template["spec"]["containers"][0]["image"] = "changed"


def test_nested_values_handed_out_are_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pod template is a `dict[str, Any]`: pydantic keeps such values as given, so only a deep copy
    # keeps a caller who changes one in place from changing the store.
    monkeypatch.setattr(memory_store, "PARSED_EVENTS", 0)  # every read parses the log's own data
    store = MemoryStore()
    submitted = job("llm")
    submitted.spec.worker.template = {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}
    created = store.create(submitted)
    created.status.restarts = 1
    updated = store.update_status(created)  # the spec (and its template) comes from the stored form
    held = [
        submitted,
        created,
        updated,
        store.get(TrainingJob, "llm", "team-a"),
        store.list(TrainingJob).items[0],
        *(event.object for event in store.events_since(0)),
    ]
    for obj in held:
        assert isinstance(obj, TrainingJob)
        _change_image(obj)
    assert _image(store.get(TrainingJob, "llm", "team-a")) == "trainer:1"
    events = store.events_since(0)
    assert [(e.type, _image(e.object)) for e in events if isinstance(e.object, TrainingJob)] == [
        ("ADDED", "trainer:1"),
        ("MODIFIED", "trainer:1"),
    ]


def test_events_past_the_parsed_ones_are_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_store, "PARSED_EVENTS", 2)
    store = MemoryStore()
    for n in range(1, 6):
        store.create(job(f"j{n}", replicas=n))
    for _ in range(2):
        replicas = [e.object.spec.replicas for e in store.events_since(0)]  # type: ignore[attr-defined]
        assert replicas == [1, 2, 3, 4, 5]
    assert len(store._parsed) == 2
    assert sum(entry.parsed is not None for entry in store._log) == 2


def test_a_write_result_is_its_own_unless_results_are_shared() -> None:
    # A client of the Store protocol may change what a write returns; only the simulator's store, whose
    # controllers copy what they change, shares the result with the event its readers get.
    plain = MemoryStore(check_shared=True)
    created = plain.create(job("llm"))
    created.spec.replicas = 7
    assert [e.object.spec.replicas for e in plain.events_since(0)] == [2]  # type: ignore[attr-defined]

    shared = MemoryStore(share_results=True, check_shared=True)
    created = shared.create(job("llm"))
    assert [e.object for e in shared.events_since(0)] == [created]
    assert shared.events_since(0)[0].object is created


def test_a_shared_result_changed_in_place_is_named_when_its_event_is_read() -> None:
    store = MemoryStore(share_results=True, check_shared=True)
    created = store.create(job("llm"))
    created.spec.replicas = 7
    with pytest.raises(memory_store.SharedObjectChanged, match="TrainingJob team-a/llm at version 1"):
        store.events_since(0)


def test_an_undone_batch_leaves_no_shared_event_behind() -> None:
    store = MemoryStore(share_results=True, check_shared=True)
    store.create(job("taken"))
    store.apply_many([job("fresh"), job("other")], dry_run=True)  # written, then undone
    after = store.create(job("later"))
    assert [(e.resource_version, e.object.name) for e in store.events_since(0)] == [
        (1, "taken"),
        (2, "later"),
    ]
    assert store.events_since(0)[-1].object is after
    assert all(entry.version <= 2 for entry in store._parsed)
