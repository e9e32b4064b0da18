"""Objects kubectl wrote that only their CRD's schema checked: where gpufleet's own checks refuse one,
the operator says so on that object (Failed, `InvalidSpec`, naming the field) and goes on with the
others; it is no failure of the operator's (nothing is logged as one, nothing retried every 30 s)."""

from __future__ import annotations

from typing import Any

from gpufleet.kube.operator import Operator

from .fakeapi import FakeApiServer
from .test_operator import Clock
from .test_scheduler import add_queues

GROUP = "/apis/gpufleet.io/v1alpha1/namespaces/team-a"
JOBS = "gpufleet.io/v1alpha1/trainingjobs"
SERVICES = "gpufleet.io/v1alpha1/inferenceservices"
GOOD_TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "t:1"}]}}


def _job(name: str, template: Any = GOOD_TEMPLATE) -> dict[str, Any]:
    worker = {"gpus": 1, "template": template}
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"queue": "team-a", "replicas": 1, "worker": worker},
    }


def _operator(api: FakeApiServer) -> Operator:
    op = Operator(api, clock=Clock(), nodes=False)
    for informer in (op.jobs, op.pods, op.services, op.checkpoints, op.inference, op.replicas):
        informer.relist()
    for obj in op.jobs.items():
        op.mark("TrainingJob", f"team-a/{obj['metadata']['name']}")
    for obj in op.inference.items():
        op.mark("InferenceService", f"team-a/{obj['metadata']['name']}")
    return op


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == kind)


def test_jobs_gpufleet_refuses_fail_with_the_field_and_the_others_run() -> None:
    api = FakeApiServer()
    add_queues(api, "team-a")
    api.request(
        "POST", f"{GROUP}/trainingjobs", body=_job("a-string-container", {"spec": {"containers": ["x"]}})
    )
    env_as_mapping = {"spec": {"containers": [{"name": "t", "image": "t:1", "env": {"A": "1"}}]}}
    api.request("POST", f"{GROUP}/trainingjobs", body=_job("env-mapping", env_as_mapping))
    api.request("POST", f"{GROUP}/trainingjobs", body=_job("b" * 70))  # its pods' label would be too long
    api.request("POST", f"{GROUP}/trainingjobs", body=_job("good"))
    op = _operator(api)
    op.reconcile_once()
    stored = api.objects[JOBS]
    for name, field in (
        ("a-string-container", "spec.worker.template.spec.containers[0]"),
        ("env-mapping", "spec.worker.template.spec.containers[0].env"),
        ("b" * 70, "gpufleet.io/training-job"),
    ):
        status = stored[("team-a", name)]["status"]
        failed = _condition(status, "Failed")
        assert status["phase"] == "Failed" and failed["reason"] == "InvalidSpec", status
        assert f"TrainingJob team-a/{name}" in failed["message"] and field in failed["message"]
        assert ("TrainingJob", f"team-a/{name}") not in op.requeue  # looked at again when it changes
    pods = {name for (_, name) in api.objects.get("/v1/pods", {})}
    assert pods == {"good-0-0"}


def test_a_checkpoint_gpufleet_refuses_stops_no_job_of_its_namespace() -> None:
    api = FakeApiServer()
    add_queues(api, "team-a")
    api.request("POST", f"{GROUP}/trainingjobs", body=_job("good"))
    bad = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Checkpoint",
        "metadata": {"name": "good-step-10", "namespace": "team-a"},
        "spec": {"job": "good", "step": 10, "uri": "s3://x", "time": "2026-01-01T00:00:00"},  # no offset
    }
    api.request("POST", f"{GROUP}/checkpoints", body=bad)
    op = _operator(api)
    op.reconcile_once()
    assert {name for (_, name) in api.objects.get("/v1/pods", {})} == {"good-0-0"}


def test_a_service_gpufleet_refuses_is_failed_not_ready_with_the_field() -> None:
    api = FakeApiServer()
    add_queues(api, "team-a")
    service = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {
            "queue": "team-a",
            "modelVersion": "v1",
            "replicas": {"min": 1, "max": 1},
            "replica": {
                "gpus": 1,
                "template": {"spec": {"containers": [{"name": "s", "ports": [{"containerPort": 0}]}]}},
            },
        },
    }
    api.request("POST", f"{GROUP}/inferenceservices", body=service)
    op = _operator(api)
    op.reconcile_once()
    status = api.objects[SERVICES][("team-a", "chat")]["status"]
    ready = _condition(status, "Ready")
    assert status["phase"] == "Failed" and ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "spec.replica.template.spec.containers[0].ports[0].containerPort" in ready["message"]
