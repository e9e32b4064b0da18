"""The embedded world places every workload under the policy of its class, decided as in Kubernetes:
a TrainingJob's workload is training, an InferenceService's replicas inference, any other workload
the class its spec states (batch when it states none)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from gpufleet.api import load_objects
from gpufleet.api.errors import ValidationError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import (
    Node,
    NodeSpec,
    OwnerRef,
    Pod,
    Workload,
    WorkloadClass,
    WorkloadPodSet,
    WorkloadSpec,
)
from gpufleet.controllers.inference import InferenceServiceController
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.training import TrainingJobController
from gpufleet.controllers.workload_class import workload_class
from gpufleet.scheduler.config import WORKLOAD_CLASSES, SchedulerConfig
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

SERVICE = """
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: serving}
spec:
  replicas: {min: 2, max: 2}
  replica: {gpus: 1, gpuModel: H100}
"""

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: research}
spec:
  replicas: 2
  worker: {gpus: 1, gpuModel: H100}
  durationSeconds: 3600
"""


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    clock = VirtualClock()
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)


def world(store: SqliteStore, **by_class: str) -> ControllerManager:
    """Two empty 8-GPU nodes and the controllers that make and place workloads."""
    for name in ("n1", "n2"):
        node = store.create(Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100", gpus=8)))
        ready = node.status.model_copy(update={"phase": "Ready"})
        store.update_status(node.model_copy(update={"status": ready}))
    config = SchedulerConfig(placement_by_class=by_class)
    controllers = [
        SchedulingController(store, config=config),
        TrainingJobController(store),
        InferenceServiceController(store),
    ]
    return ControllerManager(store, controllers)


def apply(store: SqliteStore, text: str) -> None:
    for obj in load_objects(text):
        store.apply(obj)


def settle(manager: ControllerManager) -> None:
    for _ in range(4):
        manager.step(0.0)


def nodes_of(store: SqliteStore, namespace: str) -> list[str]:
    return [p.spec.node_name for p in store.list(Pod, namespace=namespace).items]


def submit(store: SqliteStore, name: str, owner: str, stated: WorkloadClass = "batch") -> None:
    """A workload written as it is (as a user or another tool may), with one 1-GPU pod."""
    store.create(
        Workload(
            metadata=ObjectMeta(name=name, namespace="jobs"),
            spec=WorkloadSpec(
                owner=OwnerRef(kind=owner, name=name),
                workload_class=stated,
                pod_sets=[WorkloadPodSet(count=1, request=PodRequest(gpus=1))],
            ),
        )
    )


@pytest.mark.parametrize(("by_class", "nodes_used"), [({}, 2), ({"inference": "bestfit"}, 1)])
def test_an_inference_services_replicas_follow_the_inference_policy(
    store: SqliteStore, by_class: dict[str, str], nodes_used: int
) -> None:
    manager = world(store, **by_class)
    apply(store, SERVICE)
    settle(manager)
    placed = nodes_of(store, "serving")
    assert len(placed) == 2 and len(set(placed)) == nodes_used, placed
    classes = {w.spec.workload_class for w in store.list(Workload, namespace="serving").items}
    assert classes == {"inference"}


def test_a_training_jobs_workload_is_training(store: SqliteStore) -> None:
    manager = world(store, training="spread")
    apply(store, JOB)
    settle(manager)
    (job,) = store.list(Workload, namespace="research").items
    assert job.spec.workload_class == "training"
    placed = nodes_of(store, "research")
    assert len(placed) == 2 and len(set(placed)) == 2, placed  # the training policy (spread) placed it


@pytest.mark.parametrize(("stated", "nodes_used"), [("inference", 2), ("batch", 1)])
def test_a_workload_of_no_gpufleet_owner_follows_the_class_it_states(
    store: SqliteStore, stated: WorkloadClass, nodes_used: int
) -> None:
    manager = world(store)
    submit(store, "a", "Job", stated)
    submit(store, "b", "Job", stated)
    settle(manager)
    placed = nodes_of(store, "jobs")
    assert len(placed) == 2 and len(set(placed)) == nodes_used, placed


def test_the_owner_decides_over_what_the_spec_states(store: SqliteStore) -> None:
    manager = world(store)
    submit(store, "a", "InferenceService", "batch")
    submit(store, "b", "InferenceService", "batch")
    settle(manager)
    placed = nodes_of(store, "jobs")
    assert len(placed) == 2 and len(set(placed)) == 2, placed


def test_the_rule_itself() -> None:
    assert workload_class(["TrainingJob"], "inference") == "training"
    assert workload_class(["InferenceService"]) == "inference"
    assert workload_class(["Job"], "inference") == "inference"
    assert workload_class([]) == "batch"
    with pytest.raises(ValidationError, match=r"Pod team-a/p: field metadata\.labels\[x\]: unknown workload"):
        workload_class([], "web", obj="Pod team-a/p", field="metadata.labels[x]")
    # The API's type of the class and the scheduler's list of classes are the same three.
    assert get_args(WorkloadClass) == WORKLOAD_CLASSES
