"""One object the API server refuses does not hold up the operator's round for the others."""

from __future__ import annotations

from typing import Any

from gpufleet.api.training import TrainingJob
from gpufleet.kube.operator import REFUSED_RETRY_SECONDS, Operator
from gpufleet.kube.store import KubeStore
from gpufleet.kube.transport import ApiError, Json

from .fakeapi import FakeApiServer
from .test_operator import NOW, Clock
from .test_scheduler import add_queues


class RefusingStatus(FakeApiServer):
    """Answers 422 to status writes of one TrainingJob, as a schema or webhook refusal would."""

    def request(self, method: str, path: str, **options: Any) -> Json:
        if method == "PATCH" and path.endswith("/trainingjobs/bad/status"):
            raise ApiError(422, "Invalid", "status.phase: Unsupported value")
        return super().request(method, path, **options)


def job(name: str) -> TrainingJob:
    return TrainingJob.model_validate(
        {
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "queue": "team-a",
                "replicas": 1,
                "worker": {"gpus": 1, "template": {"spec": {"containers": [{"name": "t", "image": "t:1"}]}}},
            },
        }
    )


def test_a_refused_write_is_retried_later_and_the_round_goes_on() -> None:
    api = RefusingStatus()
    add_queues(api, "team-a")
    for name in ("bad", "good"):
        KubeStore(api).create(job(name))
    op = Operator(api, clock=Clock(), nodes=False)
    for informer in (op.jobs, op.pods, op.services, op.checkpoints):
        informer.relist()
    for name in ("bad", "good"):
        op.mark("TrainingJob", f"team-a/{name}")
    op.reconcile_once()  # "bad" sorts first: its refusal must not end the round
    pods = {name for (_, name) in api.objects.get("/v1/pods", {})}
    assert {"good-0-0", "bad-0-0"} <= pods
    assert api.objects["gpufleet.io/v1alpha1/trainingjobs"][("team-a", "good")].get("status")
    assert op.requeue[("TrainingJob", "team-a/bad")] == NOW + REFUSED_RETRY_SECONDS
