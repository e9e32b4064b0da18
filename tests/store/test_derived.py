"""The simulator's store derives a status write's or a deletion's result from the previous one
(`store.derived`): what it hands out and keeps must be what validating the whole object gives."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta

import pytest

import gpufleet.api.kinds as kinds_module
from gpufleet.api import TrainingJob
from gpufleet.api.errors import ValidationError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.requests import PodRequest
from gpufleet.api.resource import Resource
from gpufleet.api.runtime import OwnerRef, Pod, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.store import MemoryStore
from gpufleet.store import derived as derived_module
from gpufleet.store import memory as memory_store

from .conftest import job

# The model validators a kind may have: each reads only metadata and spec. A derived result is not
# validated whole, so a validator that reads the status must not be added without changing
# `store.derived` to skip that kind.
KNOWN_MODEL_VALIDATORS = {"_scope", "_not_own_parent", "_names_are_label_values", "_name_is_a_label_value"}


class Ticking:
    """A clock that moves a second at each reading, the same for both stores compared."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _kinds() -> list[type[Resource]]:
    return [
        value
        for value in vars(kinds_module).values()
        if inspect.isclass(value) and issubclass(value, Resource) and value is not Resource
    ]


def test_no_kind_validates_its_status_against_the_rest_of_the_object() -> None:
    kinds = _kinds()
    assert TrainingJob in kinds and Pod in kinds
    for kind in kinds:
        assert set(kind.__pydantic_decorators__.model_validators) <= KNOWN_MODEL_VALIDATORS, kind


def _with_template(name: str) -> TrainingJob:
    submitted = job(name)
    submitted.spec.worker.template = {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}
    return submitted


def _history(store: MemoryStore) -> list[tuple[str, dict[str, object]]]:
    return [(e.type, e.object.to_dict(reveal_secrets=True)) for e in store.events_since(0)]


def _scrub(history: list[tuple[str, dict[str, object]]]) -> list[tuple[str, dict[str, object]]]:
    for _, data in history:
        meta = data["metadata"]
        assert isinstance(meta, dict)
        meta.pop("uid")
    return history


def _run(store: MemoryStore) -> list[Resource | None]:
    created = store.create(_with_template("llm"))
    running = store.update_status(
        created.model_copy(update={"status": created.status.model_copy(update={"phase": "Running"})})
    )
    respec = store.update(
        running.model_copy(update={"spec": running.spec.model_copy(update={"replicas": 4})})
    )
    relabeled = store.update(
        respec.model_copy(update={"metadata": respec.metadata.model_copy(update={"labels": {"team": "a"}})})
    )
    finalized = job("held")
    finalized.metadata.finalizers = ["x"]
    held = store.create(finalized)
    deleting = store.delete(TrainingJob, "held", "team-a")
    assert isinstance(deleting, TrainingJob)
    failed = store.update_status(
        deleting.model_copy(update={"status": deleting.status.model_copy(update={"phase": "Failed"})})
    )
    released = failed.metadata.model_copy(update={"finalizers": []})
    store.update(failed.model_copy(update={"metadata": released}))
    gone = store.delete(TrainingJob, "llm", "team-a")
    return [created, running, respec, relabeled, held, deleting, failed, gone]


def derivations(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """From now on, `["hit"]` counts the writes whose result the memory store derived."""
    derived = {"hit": 0}
    real = derived_module.derive

    def counted(*args: object) -> object:
        result = real(*args)  # type: ignore[arg-type]
        derived["hit"] += result is not None
        return result

    monkeypatch.setattr(memory_store, "derive", counted)
    return derived


def test_derived_results_and_events_are_those_of_validating_the_whole_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    derived = derivations(monkeypatch)
    shared = MemoryStore(share_results=True, check_shared=True, clock=Ticking())
    plain = MemoryStore(clock=Ticking())
    results = _run(shared)
    # Two status writes and two deletions (one held by a finalizer) are derived; the changes of labels
    # and finalizers are not, nor the job's spec update (a TrainingJob's name check is a model
    # validator, so its spec is validated with the whole object).
    assert derived["hit"] == 4
    expected = _run(plain)
    for got, want in zip(results, expected, strict=True):
        if want is None:
            assert got is None
            continue
        assert got is not None
        got_dict, want_dict = got.to_dict(reveal_secrets=True), want.to_dict(reveal_secrets=True)
        got_dict["metadata"].pop("uid"), want_dict["metadata"].pop("uid")
        assert got_dict == want_dict
    assert _scrub(_history(shared)) == _scrub(_history(plain))
    # Read back whole from the stored form, the objects are the derived ones.
    for event in shared.events_since(0):
        assert event.object == type(event.object).model_validate(event.object.to_dict(reveal_secrets=True))


def test_a_refused_section_names_its_field_from_the_top() -> None:
    store = MemoryStore(share_results=True, check_shared=True)
    created = store.create(job("llm"))
    bad = created.model_copy(update={"status": created.status.model_copy(update={"restarts": -1})})
    with pytest.raises(ValidationError, match=r"TrainingJob team-a/llm: field status\.restarts"):
        store.update_status(bad)
    assert store.get(TrainingJob, "llm", "team-a").status.restarts == 0
    bad_spec = created.model_copy(update={"spec": created.spec.model_copy(update={"replicas": -3})})
    with pytest.raises(ValidationError, match=r"TrainingJob team-a/llm: field spec\.replicas"):
        store.update(bad_spec)
    assert store.get(TrainingJob, "llm", "team-a") == created


def test_a_status_write_undone_with_its_batch_is_not_derived_from(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore(share_results=True, check_shared=True)
    created = store.create(job("llm"))
    store.apply_many([job("llm", replicas=3)], dry_run=True)  # written, then undone
    running = store.update_status(
        created.model_copy(update={"status": created.status.model_copy(update={"phase": "Running"})})
    )
    assert running.spec.replicas == 2 and running.metadata.generation == 1
    assert store.get(TrainingJob, "llm", "team-a") == running


def test_a_spec_validated_alone_where_the_kind_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Workload (whose only model validator is `_scope`) going inactive: its spec alone is validated,
    and the result is what validating the whole object gives."""
    derived = derivations(monkeypatch)

    def deactivate(store: MemoryStore) -> Workload:
        made = store.create(
            Workload(
                metadata=ObjectMeta(name="wl", namespace="team-a"),
                spec=WorkloadSpec(
                    owner=OwnerRef(kind="TrainingJob", name="wl"),
                    pod_sets=[WorkloadPodSet(count=2, request=PodRequest(gpus=8))],
                ),
            )
        )
        return store.update(made.model_copy(update={"spec": made.spec.model_copy(update={"active": False})}))

    got = deactivate(MemoryStore(share_results=True, check_shared=True, clock=Ticking()))
    assert derived["hit"] == 1
    want = deactivate(MemoryStore(clock=Ticking()))
    got_dict, want_dict = got.to_dict(reveal_secrets=True), want.to_dict(reveal_secrets=True)
    got_dict["metadata"].pop("uid"), want_dict["metadata"].pop("uid")
    assert got_dict == want_dict and not got.spec.active
