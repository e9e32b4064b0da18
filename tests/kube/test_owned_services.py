"""The operator's Services are created once: a reconcile that finds one in its informer posts nothing
(each rejected POST of a ClusterIP Service makes a real API server allocate and release an IP)."""

from __future__ import annotations

from gpufleet.kube.operator import Operator

from . import test_inference as inference
from . import test_operator as training
from .fakeapi import FakeApiServer

SERVICES = "/api/v1/namespaces/team-a/services"


def service_posts(api: FakeApiServer) -> int:
    return api.requests.count(("POST", SERVICES))


def test_a_training_job_s_headless_service_is_posted_once_over_many_reconciles(api: FakeApiServer) -> None:
    op = Operator(api, clock=training.Clock(), nodes=False)
    training.make_job(api)
    for _ in range(6):
        training.sync(op)
    assert service_posts(api) == 1
    assert ("team-a", "llm") in api.objects["/v1/services"]


def test_a_training_job_s_service_deleted_by_someone_is_made_again(api: FakeApiServer) -> None:
    op = Operator(api, clock=training.Clock(), nodes=False)
    training.make_job(api)
    training.sync(op)
    api.request("DELETE", f"{SERVICES}/llm")
    training.sync(op)
    training.sync(op)
    assert service_posts(api) == 2
    assert ("team-a", "llm") in api.objects["/v1/services"]


def test_an_inference_service_s_service_is_posted_once_over_many_reconciles(api: FakeApiServer) -> None:
    op = Operator(api, clock=training.Clock(), nodes=False)
    inference.make_service(api)
    for _ in range(6):
        inference.sync(op)
    assert service_posts(api) == 1
    service = api.objects["/v1/services"][("team-a", "chat")]
    assert service["spec"]["ports"][0]["port"] == 8000
