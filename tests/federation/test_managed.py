"""What differs between the kinds a manager dispatches: the gang placed for a service, and what a move
costs (a job that had started restarts; a service starts afresh)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.api import load_objects
from gpufleet.api.inference import InferenceService
from gpufleet.api.training import TrainingJob
from gpufleet.federation.managed import taken_back_status, workload_of

SERVICE = """
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: serving}
spec:
  queue: serving
  modelVersion: llama
  replicas: {min: 2, max: 8}
  replica: {gpus: 1, gpuModel: H100-80GB}
"""

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team}
spec: {queue: team, replicas: 4, worker: {gpus: 8}}
"""


def test_a_service_is_dispatched_as_max_replicas_of_which_min_must_fit() -> None:
    service = load_objects(SERVICE)[0]
    assert isinstance(service, InferenceService)
    (pod_set,) = workload_of(service).pod_sets
    assert (pod_set.count, pod_set.minimum) == (8, 2)
    assert workload_of(service).queue == "serving"


def test_moving_a_started_job_is_a_restart_and_moving_a_service_is_not() -> None:
    job = load_objects(JOB)[0]
    service = load_objects(SERVICE)[0]
    assert isinstance(job, TrainingJob) and isinstance(service, InferenceService)
    job.status.phase, job.status.start_time, job.status.nodes = "Running", datetime.now(UTC), ["n1"]
    service.status.phase, service.status.ready_replicas = "Running", 2
    status, restarted = taken_back_status(job)
    assert restarted and status.restarts == 1 and status.phase == "Pending" and status.nodes == []
    status, restarted = taken_back_status(service)
    assert not restarted and status.phase == "Pending" and status.ready_replicas == 0
    job.status.start_time = None
    assert taken_back_status(job)[1] is False, "never started: nothing lost"
