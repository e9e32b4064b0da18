"""`store.fresh`: a model validated from the copy shares no container with the stored form, while
only the values pydantic keeps as given are copied."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pydantic

from gpufleet.api import TrainingJob
from gpufleet.api.meta import PendingReason
from gpufleet.store.fresh import DEEP, fresh, plan_of
from gpufleet.store.objects import kind_of, load

from .conftest import job


def _containers(value: Any) -> Iterator[int]:
    """The ids of every dict and list reachable from a model or plain data."""
    if isinstance(value, pydantic.BaseModel):
        for item in value.__dict__.values():
            yield from _containers(item)
    elif isinstance(value, dict):
        yield id(value)
        for item in value.values():
            yield from _containers(item)
    elif isinstance(value, list | tuple):
        yield id(value)
        for item in value:
            yield from _containers(item)


def _stored_job() -> dict[str, Any]:
    obj = job("llm")
    obj.spec.worker.template = {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}
    obj.status.pending_reason = PendingReason(type="NoFit", details={"rejected": {"gpu": [1, 2]}})
    stored: dict[str, Any] = obj.to_dict(reveal_secrets=True)
    return stored


def test_a_model_validated_from_the_copy_shares_no_container_with_the_stored_form() -> None:
    stored = _stored_job()
    copied = fresh(TrainingJob, stored)
    model = load(kind_of(TrainingJob), copied)
    assert set(_containers(model)).isdisjoint(_containers(stored))
    assert copied == stored


def test_only_values_kept_as_given_are_copied() -> None:
    stored = _stored_job()
    copied = fresh(TrainingJob, stored)
    assert copied["spec"]["worker"]["template"]["spec"] is not stored["spec"]["worker"]["template"]["spec"]
    details = copied["status"]["pendingReason"]["details"]
    assert details["rejected"] is not stored["status"]["pendingReason"]["details"]["rejected"]
    # Validation builds the rest anew: shared with the stored form, not copied.
    assert copied["metadata"] is stored["metadata"]
    assert copied["spec"]["queue"] is stored["spec"]["queue"]


def test_what_validation_may_keep_as_given_is_copied_whole() -> None:
    class Free(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")

    class Before(pydantic.BaseModel):
        names: list[str]

        @pydantic.field_validator("names", mode="before")
        @classmethod
        def _as_given(cls, value: Any) -> Any:
            return value

    class Either(pydantic.BaseModel):
        value: dict[str, Any] | list[Any]

    class Plain(pydantic.BaseModel):
        names: list[str]
        count: int

    assert plan_of(Free) is DEEP
    assert plan_of(Before) == {"names": DEEP}
    assert plan_of(Either) == {"value": DEEP}
    assert plan_of(Plain) is None
    data = {"names": ["a"], "count": 1}
    assert fresh(Plain, data) is data
