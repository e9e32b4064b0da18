"""What differs between the kinds a manager dispatches: the gang placed for a service, and what a move
costs (a job that had started restarts and loses what it ran since its checkpoint; a service starts
afresh)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpufleet.api import load_objects
from gpufleet.api.inference import InferenceService
from gpufleet.api.status import CheckpointRef
from gpufleet.api.training import TrainingJob, TrainingJobStatus
from gpufleet.federation.link import LOST, MOVED
from gpufleet.federation.managed import taken_back, workload_of

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


def test_a_move_counts_a_restart_and_the_work_since_the_checkpoint_and_a_service_loses_nothing() -> None:
    job = load_objects(JOB)[0]
    service = load_objects(SERVICE)[0]
    assert isinstance(job, TrainingJob) and isinstance(service, InferenceService)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    job.status.phase, job.status.start_time, job.status.replicas = "Running", start, 4
    job.status.restarts, job.status.lost_gpu_seconds = 2, 10.0  # what its worker counted
    job.status.last_checkpoint = CheckpointRef(name="llm-100", step=100, time=start + timedelta(seconds=100))
    status, carried = taken_back(job, stopped_at=(start + timedelta(seconds=160)).timestamp())
    assert isinstance(status, TrainingJobStatus)
    assert status.phase == "Pending" and status.nodes == [] and status.start_time is None
    assert (status.restarts, status.lost_gpu_seconds) == (3, 10.0 + 32 * 60), "4 workers x 8 GPUs x 60 s"
    assert carried == {MOVED: "3", LOST: "1930"}, "the next worker's counts are added to these"

    service.status.phase, service.status.ready_replicas = "Running", 2
    status, carried = taken_back(service, stopped_at=start.timestamp())
    assert status.phase == "Pending" and status.ready_replicas == 0 and carried == {}

    never = load_objects(JOB)[0]
    assert isinstance(never, TrainingJob)
    assert taken_back(never, stopped_at=start.timestamp()) == (never.status, {}), (
        "never started: nothing lost"
    )
