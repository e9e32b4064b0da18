"""GPUs in a pod template mean what they say or are refused: gpufleet schedules a pod by its request
(`gpus`, `gpuMilli`, `mig`), so a template GPU resource that says anything else is an error naming the
template's field and the request's field to use; one that agrees with the request is accepted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpufleet.api import parse_object
from gpufleet.api.errors import ValidationError
from gpufleet.api.kinds import kind_info
from gpufleet.api.validation import revalidate

LIMIT = "spec.worker.template.spec.containers[0].resources.limits"


def job(
    worker: dict[str, Any], *containers: dict[str, Any], init: list[dict[str, Any]] | None = None
) -> dict:
    pod: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        pod["initContainers"] = init
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": {"replicas": 2, "worker": {**worker, "template": {"spec": pod}}},
    }


def container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "main", "image": "trainer", "resources": resources}


def refused(data: dict) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_object(data)
    return caught.value


@pytest.mark.parametrize(
    ("resource", "use"),
    [
        ("nvidia.com/gpu", "spec.worker.gpus: 8"),
        ("nvidia.com/mig-3g.40gb", "spec.worker.mig: 3g.40gb"),
        ("nvidia.com/gpu.shared", "spec.worker.gpuMilli"),
    ],
)
def test_gpus_only_in_the_template_are_refused_naming_the_field_to_use(resource: str, use: str) -> None:
    amount = 8 if resource == "nvidia.com/gpu" else 1
    error = refused(job({}, container({resource: amount})))
    assert error.field == f"{LIMIT}.{resource}"
    assert use in str(error) and "not read from the pod template" in str(error)
    assert str(error).startswith(f"TrainingJob team-a/llm: field {LIMIT}.{resource}:")


def test_a_template_that_says_what_the_request_says_is_accepted() -> None:
    parse_object(job({"gpus": 8}, container({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": "8"})))
    parse_object(job({"mig": "1g.10gb"}, container({"nvidia.com/mig-1g.10gb": 1})))
    parse_object(job({"gpuMilli": 500}, container({"nvidia.com/gpu.shared": "1"})))
    parse_object(job({}, container({"cpu": 4, "nvidia.com/gpu": 0})))  # asks for none, as the request


def test_a_template_that_disagrees_with_the_request_is_refused() -> None:
    error = refused(job({"gpus": 4}, container({"nvidia.com/gpu": 8})))
    assert error.field == f"{LIMIT}.nvidia.com/gpu"
    assert "spec.worker asks for nvidia.com/gpu: 4" in str(error)
    error = refused(job({"gpus": 1}, container({"nvidia.com/mig-1g.10gb": 1})))
    assert error.field == f"{LIMIT}.nvidia.com/mig-1g.10gb"
    error = refused(job({"gpus": 8}, container(requests={"nvidia.com/gpu": 2})))
    assert error.field == "spec.worker.template.spec.containers[0].resources.requests.nvidia.com/gpu"


def test_gpus_on_another_container_or_an_init_container_are_refused() -> None:
    side = {**container({"nvidia.com/gpu": 1}), "name": "side"}
    error = refused(job({"gpus": 8}, container(), side))
    assert error.field == "spec.worker.template.spec.containers[1].resources.limits.nvidia.com/gpu"
    assert "first container" in str(error)
    error = refused(job({"gpus": 1}, container(), init=[container({"nvidia.com/gpu": 1})]))
    assert error.field == "spec.worker.template.spec.initContainers[0].resources.limits.nvidia.com/gpu"


def test_an_inference_service_replica_template_is_checked_too() -> None:
    service = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "serving"},
        "spec": {
            "replicas": {"min": 1, "max": 2},
            "replica": {"template": {"spec": {"containers": [container({"nvidia.com/gpu": 1})]}}},
        },
    }
    error = refused(service)
    assert error.field == "spec.replica.template.spec.containers[0].resources.limits.nvidia.com/gpu"
    assert "spec.replica.gpus: 1" in str(error)


def test_a_stored_object_is_read_back_as_it_was_written() -> None:
    """A job an older version stored with GPUs in its template stays readable (the store and the
    controllers read it); only writes are refused."""
    data = job({}, container({"nvidia.com/gpu": 8}))
    info = kind_info("TrainingJob")
    assert info is not None
    obj = revalidate(info, copy.deepcopy(data))
    assert obj.spec.worker.template is not None
