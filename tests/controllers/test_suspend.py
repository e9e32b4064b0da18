"""`spec.suspend` on a TrainingJob (Kueue's stop and resume) in the embedded world: a running job is
evicted as a preemption would evict it, its GPUs go to other work, and resuming queues it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.api.inference import InferenceService
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Node, NodeSpec, Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob
from gpufleet.controllers.inference import InferenceServiceController
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.training import TrainingJobController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

JOBS = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: first, namespace: ml}
spec: {replicas: 2, worker: {gpus: 8}, durationSeconds: 3600}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: second, namespace: ml}
spec: {replicas: 2, worker: {gpus: 8}, durationSeconds: 3600}
"""


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)


def world(store: SqliteStore) -> ControllerManager:
    """Two 8-GPU nodes: room for one of the two jobs."""
    for name in ("n1", "n2"):
        node = store.create(
            Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100-80GB", gpus=8))
        )
        store.update_status(
            node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})})
        )
    return ControllerManager(store, [SchedulingController(store), TrainingJobController(store)])


def settle(manager: ControllerManager, now: float) -> None:
    for _ in range(6):
        manager.step(now)


def set_suspend(store: SqliteStore, name: str, value: bool) -> None:
    job = store.get(TrainingJob, name, "ml")
    store.update(job.model_copy(update={"spec": job.spec.model_copy(update={"suspend": value})}))


def phases(store: SqliteStore) -> dict[str, str]:
    return {job.name: job.status.phase for job in store.list(TrainingJob, namespace="ml").items}


def test_suspending_a_running_job_frees_its_gpus_and_resuming_queues_it_again(store: SqliteStore) -> None:
    manager = world(store)
    for obj in load_objects(JOBS):
        store.apply(obj)
    settle(manager, 0.0)
    assert phases(store) == {"first": "Admitted", "second": "Pending"}

    set_suspend(store, "first", True)
    settle(manager, 60.0)
    assert phases(store) == {"first": "Suspended", "second": "Admitted"}
    first = store.get(TrainingJob, "first", "ml")
    suspended = next(c for c in first.status.conditions if c.type == "Suspended")
    assert suspended.status == "True" and first.status.nodes == [] and first.status.replicas == 0
    assert first.status.restarts == 1  # stopped as a preemption is: it resumes from its checkpoint
    workload = store.get(WorkloadObject, "job-first", "ml")
    assert workload.status.phase == "Inactive" and workload.status.evictions[-1].reason == "Suspended"
    pods = {p.spec.workload: p.spec.node_name for p in store.list(Pod, namespace="ml").items}
    assert set(pods) == {"job-second"}

    set_suspend(store, "first", False)
    settle(manager, 120.0)
    first = store.get(TrainingJob, "first", "ml")
    assert first.status.phase == "Pending"  # queued again behind the job now holding the GPUs
    resumed = next(c for c in first.status.conditions if c.type == "Suspended")
    assert (resumed.status, resumed.reason) == ("False", "Resumed")

    set_suspend(store, "second", True)
    settle(manager, 180.0)
    assert phases(store) == {"first": "Admitted", "second": "Suspended"}
    assert sorted(store.get(TrainingJob, "first", "ml").status.nodes) == ["n1", "n2"]


def test_a_job_suspended_before_it_starts_never_takes_gpus(store: SqliteStore) -> None:
    manager = world(store)
    text = JOBS.split("---")[0].replace("durationSeconds: 3600", "durationSeconds: 3600, suspend: true")
    for obj in load_objects(text):
        store.apply(obj)
    settle(manager, 0.0)
    job = store.get(TrainingJob, "first", "ml")
    assert job.status.phase == "Suspended" and job.status.restarts == 0
    assert store.list(Pod, namespace="ml").items == []
    set_suspend(store, "first", False)
    settle(manager, 10.0)
    assert store.get(TrainingJob, "first", "ml").status.phase == "Admitted"


SERVICE = """
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: ml}
spec: {replicas: {min: 2, max: 2}, replica: {gpus: 8}}
"""


def test_a_suspended_service_releases_every_replica_and_gets_them_back(store: SqliteStore) -> None:
    world(store)
    manager = ControllerManager(
        store, [SchedulingController(store), TrainingJobController(store), InferenceServiceController(store)]
    )
    for obj in load_objects(SERVICE):
        store.apply(obj)
    settle(manager, 0.0)
    for obj in load_objects(JOBS.split("---")[0]):
        store.apply(obj)
    settle(manager, 1.0)
    assert phases(store) == {"first": "Pending"}  # the service's two replicas hold both nodes

    set_service_suspend(store, True)
    settle(manager, 10.0)
    service = store.get(InferenceService, "chat", "ml")
    suspended = next(c for c in service.status.conditions if c.type == "Suspended")
    assert service.status.phase == "Suspended" and suspended.status == "True"
    assert service.status.desired_replicas == 0
    assert phases(store) == {"first": "Admitted"}  # its GPUs went to the waiting job

    set_service_suspend(store, False)
    settle(manager, 20.0)
    service = store.get(InferenceService, "chat", "ml")
    assert service.status.phase == "Pending" and service.status.desired_replicas == 2
    resumed = next(c for c in service.status.conditions if c.type == "Suspended")
    assert (resumed.status, resumed.reason) == ("False", "Resumed")


def set_service_suspend(store: SqliteStore, value: bool) -> None:
    service = store.get(InferenceService, "chat", "ml")
    store.update(service.model_copy(update={"spec": service.spec.model_copy(update={"suspend": value})}))
