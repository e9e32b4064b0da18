"""Invalid manifests are rejected with the object and the YAML path of the field at fault."""

from __future__ import annotations

import pytest

from gpufleet.api import DEFAULT_PRIORITY_CLASSES, TrainingJob, load_objects, parse_object
from gpufleet.api.errors import ValidationError

JOB = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "llm", "namespace": "team-a"},
    "spec": {"replicas": 4, "worker": {"gpus": 8}},
}
SERVICE = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "chat"},
    "spec": {"replicas": {"min": 1, "max": 2}, "replica": {"gpus": 1}},
}
POOL = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "GPUPool",
    "metadata": {"name": "p"},
    "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8},
}


def with_spec(base: dict, **changes: object) -> dict:
    """A copy of `base` whose spec has `changes` merged in (dotted keys reach into sub-mappings)."""
    import copy

    data = copy.deepcopy(base)
    for dotted, value in changes.items():
        target = data["spec"]
        *parents, leaf = dotted.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            with_spec(JOB, **{"worker.gpus": -1}),
            "TrainingJob team-a/llm: field spec.worker.gpus: must be >= 0",
        ),
        (with_spec(JOB, replicas=-1), "TrainingJob team-a/llm: field spec.replicas: must be >= 1"),
        (
            with_spec(JOB, minReplicas=5),
            "TrainingJob team-a/llm: field spec.minReplicas: must be <= replicas",
        ),
        (with_spec(JOB, **{"worker.gpuMilli": 500}), "field spec.worker.gpuMilli: set only one of gpus"),
        (with_spec(JOB, worker={"gpuMilli": 1000}), "field spec.worker.gpuMilli: must be <= 999"),
        (with_spec(JOB, worker={"gpuMilli": 0}), "field spec.worker.gpuMilli: must be >= 1"),
        (with_spec(JOB, worker={"mig": "3g40gb"}), "field spec.worker.mig: '3g40gb' is not a MIG profile"),
        (with_spec(JOB, worker={"mig": "9g.40gb"}), "field spec.worker.mig:"),
        (with_spec(JOB, **{"worker.memory": "12Qi"}), "field spec.worker.memory: unknown unit 'Qi'"),
        (with_spec(JOB, **{"worker.cpu": "lots"}), "field spec.worker.cpu: not a quantity"),
        (with_spec(JOB, **{"worker.cpu": "1e5000"}), "field spec.worker.cpu: '1e5000' is larger than"),
        (with_spec(JOB, **{"worker.cpu": "1e999990"}), "field spec.worker.cpu: '1e999990' is larger than"),
        (with_spec(JOB, **{"worker.memory": "9e999999Ei"}), "field spec.worker.memory: '9e999999Ei' is"),
        (with_spec(JOB, **{"worker.memory": "8Ei"}), "largest quantity allowed (2^63-1)"),
        ({**JOB, "metadata": {"name": "llm\n"}}, "field metadata.name: 'llm\\n' is not a valid name"),
        (
            {**JOB, "metadata": {"name": "llm", "namespace": "team-a\n"}},
            "field metadata.namespace: 'team-a\\n' is not a valid namespace",
        ),
        ({**JOB, "metadata": {"name": "\ud800"}}, "is not a valid name"),
        ({**JOB, "metadata": {"name": "j", "labels": {"a": "b\n"}}}, "field metadata.labels"),
        (with_spec(JOB, priorityClass="gold"), "field spec.priorityClass: unknown priority class 'gold'"),
        (with_spec(JOB, replica=3), "field spec.replica: unknown field"),
        (
            with_spec(JOB, **{"checkpoint.intervalSeconds": 0}),
            "field spec.checkpoint.intervalSeconds: must be >= 1",
        ),
        (
            with_spec(JOB, **{"checkpoint.intervalSeconds": 0.000001}),
            "field spec.checkpoint.intervalSeconds: must be >= 1",
        ),
        (
            with_spec(SERVICE, replicas={"min": 3, "max": 2}),
            "InferenceService default/chat: field spec.replicas.min",
        ),
        (with_spec(SERVICE, rollout={"maxSurge": 0, "maxUnavailable": 0}), "field spec.rollout.maxSurge"),
        (with_spec(POOL, capacityType="cheap"), "GPUPool p: field spec.capacityType: must be one of"),
        (
            with_spec(POOL, nvlinkDomains=[[0, 1], [1, 2]]),
            "field spec.nvlinkDomains.1: GPU 1 is in two domains",
        ),
        (with_spec(POOL, nvlinkDomains=[[0, 8]]), "field spec.nvlinkDomains.0: GPU 8 is not in 0..7"),
        # YAML's .inf and JSON's Infinity, and a float past any quantity (said short, not in 309 digits).
        (with_spec(JOB, **{"worker.cpu": float("inf")}), "field spec.worker.cpu: must be a finite quantity"),
        (with_spec(JOB, **{"worker.memory": float("nan")}), "field spec.worker.memory: must be a finite"),
        (with_spec(JOB, **{"worker.cpu": 1e308}), "'1e+308' is larger than the largest quantity"),
        (with_spec(POOL, sharing={"mig": {"9": ["1g.10gb"]}}), "field spec.sharing.mig.9"),
        # A job's and a service's name become their pods' labels, as a model version does its
        # replicas' (the controllers failed on each object they made, every few seconds, for ever).
        ({**JOB, "metadata": {"name": "j" * 64}}, "field metadata.name: too long: its pods carry"),
        # 60 characters fit the job's label, not its Workload's ("job-" and the name).
        ({**JOB, "metadata": {"name": "j" * 60}}, f"carry 'job-{'j' * 60}' as their gpufleet.io/workload"),
        ({**SERVICE, "metadata": {"name": "s" * 58}}, f"'svc-{'s' * 58}-1' as their gpufleet.io/workload"),
        (with_spec(SERVICE, modelVersion="v" * 64), "field spec.modelVersion: the model version"),
        (with_spec(SERVICE, modelVersion="*"), "field spec.modelVersion: '*' is not a valid name"),
        # The pool's name, block and racks become its nodes' labels (the controller failed on them).
        ({**POOL, "metadata": {"name": "p" * 41}}, "field metadata.name: at most 40 characters"),
        (with_spec(POOL, topology={"block": "b c"}), "field spec.topology.block: the block 'b c' is not"),
        (
            with_spec(POOL, topology={"block": "b" * 60, "racks": 11}),
            f"field spec.topology: rack '{'b' * 60}-r10' is not a valid label value",
        ),
        (with_spec(POOL, sharing={"mig": {"²": ["1g.10gb"]}}), "mig.²: keys are GPU indices or '*'"),
        (
            with_spec(POOL, sharing={"mps": {"replicas": 2}, "timeSlicing": {"replicas": 2}}),
            "one sharing mode",
        ),
        (with_spec(POOL, autoscaling={"minNodes": 5, "maxNodes": 2}), "field spec.autoscaling.minNodes"),
        ({**POOL, "metadata": {"name": "p", "namespace": "x"}}, "GPUPool p: field metadata.namespace:"),
        ({**JOB, "metadata": {"name": "Bad_Name"}}, "field metadata.name: 'Bad_Name' is not a valid name"),
        ({**JOB, "metadata": {"name": "j", "labels": {"a": "b c"}}}, "field metadata.labels"),
        ({**JOB, "spec": {"worker": {"gpus": 1}}}, "field spec.replicas: required field is missing"),
    ],
)
def test_bad_fields_are_named(data: dict, expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_object(data)
    assert expected in str(caught.value)


def test_error_carries_the_field_path_separately() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_object(with_spec(JOB, **{"worker.gpus": -1}))
    assert caught.value.obj == "TrainingJob team-a/llm"
    assert caught.value.field == "spec.worker.gpus"


def test_priority_classes_come_from_the_configured_table() -> None:
    gold = with_spec(JOB, priorityClass="gold")
    job = parse_object(gold, priority_classes={**DEFAULT_PRIORITY_CLASSES, "gold": 5000})
    assert isinstance(job, TrainingJob) and job.spec.priority_class == "gold"
    with pytest.raises(ValidationError, match="unknown priority class 'research'"):
        parse_object(with_spec(JOB, priorityClass="research"), priority_classes={"gold": 5000})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: gpufleet.io/v1alpha1\nkind: Pizza\nmetadata: {name: x}\n",
            "document 1: unknown kind 'Pizza'",
        ),
        (
            "apiVersion: gpufleet.io/v2\nkind: Queue\nmetadata: {name: x}\n",
            "document 1: Queue: apiVersion 'gpufleet.io/v2' is not served; use gpufleet.io/v1alpha1",
        ),
        ("kind: Queue\nmetadata: {name: x}\n", "document 1: every object needs apiVersion and kind"),
        ("- just\n- a list\n", "document 1: expected a mapping"),
        ("a: [unclosed\n", "not valid YAML"),
    ],
)
def test_document_level_errors_name_the_document(text: str, expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        load_objects(text)


def test_a_bad_document_anywhere_loads_nothing(contract_yaml: str) -> None:
    broken = contract_yaml + "---\napiVersion: gpufleet.io/v1alpha1\nkind: Nope\nmetadata: {name: x}\n"
    with pytest.raises(ValidationError, match="document 7: unknown kind 'Nope'"):
        load_objects(broken)


def test_files_are_named_in_errors(tmp_path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("---\napiVersion: x/v1\nkind: Nope\n")
    with pytest.raises(ValidationError, match=r"jobs\.yaml document 1: unknown kind"):
        load_objects(path)
    with pytest.raises(ValidationError, match=r"missing\.yaml: cannot read"):
        load_objects(tmp_path / "missing.yaml")
