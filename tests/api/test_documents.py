"""YAML out and back in gives the same objects, for the contract and for generated objects."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.api import (
    Condition,
    ObjectMeta,
    PendingReason,
    PodRequest,
    Resource,
    TrainingJob,
    TrainingJobSpec,
    dump_objects,
    load_objects,
    set_condition,
)
from gpufleet.api.documents import field_line
from gpufleet.api.errors import ValidationError
from gpufleet.api.meta import ConditionStatus, holds_condition


def test_contract_round_trips(contract_yaml: str) -> None:
    objects = load_objects(contract_yaml)
    text = dump_objects(objects)
    assert load_objects(text) == objects
    documents = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in documents] == [o.kind for o in objects]
    assert documents[0]["spec"]["pricePerGPUHour"] == 3.0  # YAML names, not Python names
    assert "labels" not in documents[0]["metadata"]  # empty metadata maps are left out


def test_empty_documents_are_skipped() -> None:
    assert load_objects("---\n---\n") == []


names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
requests = st.one_of(
    st.builds(PodRequest, gpus=st.integers(0, 16)),
    st.builds(PodRequest, gpu_milli=st.integers(1, 999)),
    st.builds(PodRequest, mig=st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "1g.10gb+me"])),
).map(lambda r: r.model_copy(update={"cpu": "500m", "memory": "64Gi"}))
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@st.composite
def jobs(draw: st.DrawFn) -> TrainingJob:
    replicas = draw(st.integers(1, 64))
    job = TrainingJob(
        metadata=ObjectMeta(
            name=draw(names),
            namespace=draw(names),
            labels=draw(st.dictionaries(names, names, max_size=3)),
            creation_timestamp=draw(times),
        ),
        spec=TrainingJobSpec(
            replicas=replicas,
            min_replicas=draw(st.integers(1, replicas)),
            worker=draw(requests),
            priority_class=draw(st.sampled_from([None, "research", "system-critical"])),
            duration_seconds=draw(st.floats(1, 1e6)),
        ),
    )
    job.status.phase = draw(st.sampled_from(["Pending", "Admitted", "Running", "Succeeded", "Failed"]))
    job.status.pending_reason = PendingReason(type="NoFit", message="no", details={"nodes": 3})
    job.status.conditions = [Condition(type="Admitted", status="True", last_transition_time=draw(times))]
    return job


@settings(max_examples=60, deadline=None)
@given(st.lists(jobs(), max_size=4))
def test_dump_then_load_is_identity(objects: list[Resource]) -> None:
    assert load_objects(dump_objects(objects)) == objects


def test_set_condition_moves_time_only_on_status_change() -> None:
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    conditions = set_condition([], Condition(type="Ready", status="False"), now=t0)
    same = set_condition(conditions, Condition(type="Ready", status="False", reason="Still"), now=t1)
    assert same[0].last_transition_time == t0 and same[0].reason == "Still"
    moved = set_condition(same, Condition(type="Ready", status="True"), now=t1)
    assert len(moved) == 1 and moved[0].last_transition_time == t1
    # Nothing but the time to say: the condition as it was, not a copy.
    again = set_condition(moved, Condition(type="Ready", status="True"), now=t0)
    assert again[0] is moved[0]
    told = set_condition(moved, Condition(type="Ready", status="True", observed_generation=3), now=t0)
    assert told[0].observed_generation == 3 and told[0].last_transition_time == t1


words = st.sampled_from(["Ready", "Admitted", "NodesReady", "", "x"])
conditions = st.builds(
    Condition,
    type=st.sampled_from(["Ready", "Admitted"]),
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=words,
    message=words,
    last_transition_time=st.sampled_from([None, datetime(2026, 1, 1, tzinfo=UTC)]),
    observed_generation=st.sampled_from([None, 2]),
)


@given(
    st.lists(conditions, max_size=3, unique_by=lambda c: c.type),
    st.sampled_from(["Ready", "Admitted"]),
    st.sampled_from(["True", "False"]),
    words,
    words,
)
def test_a_held_condition_is_one_setting_it_again_would_not_change(
    held: list[Condition], kind: str, status: ConditionStatus, reason: str, message: str
) -> None:
    condition = Condition(type=kind, status=status, reason=reason, message=message)
    again = set_condition(held, condition, now=datetime(2026, 2, 1, tzinfo=UTC))
    assert holds_condition(held, kind, condition.status, reason, message) == (again == held)


POOL_FILE = """\
# a comment, so the document does not start on line 1
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: p1}
spec:
  gpuModel: H100-80GB
  gpusPerNode: 8x
  sharing:
    mig:
      0: [3g.40gb, nope]
"""


@pytest.mark.parametrize(
    ("old", "new", "line", "field"),
    [
        ("", "", 7, "spec.gpusPerNode"),
        ("gpusPerNode: 8x", "gpusPerNode: 8", 10, "spec.sharing.mig.0[1]"),
        (
            "gpusPerNode: 8x\n  sharing:\n    mig:\n      0: [3g.40gb, nope]\n",
            "gpusPerNode: 8\n  bogus: 1\n",
            8,
            "spec.bogus",
        ),
    ],
)
def test_file_errors_name_the_file_and_the_line(
    tmp_path: Path, old: str, new: str, line: int, field: str
) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(POOL_FILE.replace(old, new))
    with pytest.raises(ValidationError) as caught:
        load_objects(path)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{path}:{line}: GPUPool p1: field {field}: "), str(caught.value)


def test_second_document_lines_count_from_the_file_start(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(
        POOL_FILE.replace("8x", "8").replace("nope", "1g.10gb") + "---\n" + POOL_FILE.replace("p1", "p2")
    )
    with pytest.raises(ValidationError) as caught:
        load_objects(path)
    assert str(caught.value).startswith(f"{path}:18: GPUPool p2: field spec.gpusPerNode"), str(caught.value)
    assert field_line(None, "spec") is None
