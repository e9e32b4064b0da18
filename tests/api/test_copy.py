"""`ApiModel.model_copy`: the same copy as pydantic's, by a shorter path."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, PrivateAttr

from gpufleet.api import Condition, ObjectMeta, PodRequest, TrainingJob, TrainingJobSpec
from gpufleet.api.base import ApiModel
from gpufleet.api.runtime import PodStatus


def _parts(model: BaseModel) -> tuple[Any, ...]:
    return (
        type(model),
        model.__dict__,
        model.__pydantic_fields_set__,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


names = st.from_regex(r"[a-z][a-z0-9-]{0,12}[a-z0-9]", fullmatch=True)


@st.composite
def jobs(draw: st.DrawFn) -> TrainingJob:
    replicas = draw(st.integers(1, 16))
    job = TrainingJob(
        metadata=ObjectMeta(
            name=draw(names), namespace=draw(names), labels=draw(st.dictionaries(names, names, max_size=3))
        ),
        spec=TrainingJobSpec(
            replicas=replicas, min_replicas=draw(st.integers(1, replicas)), worker=PodRequest(gpus=8)
        ),
    )
    job.status.phase = draw(st.sampled_from(["Pending", "Running", "Succeeded"]))
    job.status.conditions = [Condition(type="Admitted", status="True")]
    return job


updates = st.dictionaries(
    st.sampled_from(["phase", "reason", "message", "restarts", "ready"]),
    st.one_of(st.none(), st.text(max_size=5), st.integers(0, 9)),
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(jobs(), updates)
def test_a_copy_is_pydantics_copy(job: TrainingJob, update: dict[str, Any]) -> None:
    before = job.to_dict()
    for model in (job, job.status, job.spec, job.metadata):
        ours = model.model_copy(update=update)
        theirs = BaseModel.model_copy(model, update=update)
        assert _parts(ours) == _parts(theirs)
        assert ours.__dict__ is not model.__dict__
        assert ours.__pydantic_fields_set__ is not model.__pydantic_fields_set__
    assert job.to_dict() == before  # the original is left as it was


def test_a_copy_shares_values_and_changes_none() -> None:
    status = PodStatus(phase="Pending")
    copied = status.model_copy(update={"phase": "Running"})
    assert (status.phase, copied.phase) == ("Pending", "Running")
    assert copied.conditions is status.conditions  # shallow, as pydantic's
    assert copied.model_fields_set == {"phase"}


class _WithPrivate(ApiModel):
    name: str = ""
    _seen: int = PrivateAttr(default=0)


def test_a_model_with_private_values_takes_pydantics_path() -> None:
    model = _WithPrivate(name="a")
    model._seen = 3
    copied = model.model_copy(update={"name": "b"})
    assert (copied.name, copied._seen) == ("b", 3)
    deep = model.model_copy(deep=True)
    assert deep.__pydantic_private__ == {"_seen": 3}
    assert deep.__pydantic_private__ is not model.__pydantic_private__


class _WithExtra(ApiModel):
    model_config = ConfigDict(extra="allow")
    name: str = ""


def test_a_model_with_extra_values_keeps_them_in_its_copies() -> None:
    model = _WithExtra.model_validate({"name": "a", "colour": "blue"})
    copied = model.model_copy(update={"name": "b"})
    assert (copied.name, copied.__pydantic_extra__) == ("b", {"colour": "blue"})
    assert copied.__pydantic_extra__ is not model.__pydantic_extra__
