"""A job that names its GPU model by an alias (`H100`) runs on the pool of that model (`H100-80GB`):
the alias is written as the catalogue's name, which placement compares exactly."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Node, NodeSpec, Pod
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.training import TrainingJobController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: research}
spec:
  replicas: 2
  worker: {gpus: 8, gpuModel: H100}
  durationSeconds: 3600
"""


def test_a_job_asking_for_an_alias_is_placed_on_nodes_of_the_canonical_model(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)
    for name, model in (("a100", "A100-80GB"), ("h1", "H100-80GB"), ("h2", "H100-80GB")):
        node = store.create(Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model=model, gpus=8)))
        store.update_status(
            node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})})
        )
    manager = ControllerManager(store, [SchedulingController(store), TrainingJobController(store)])
    for obj in load_objects(JOB):
        store.apply(obj)
    for _ in range(4):
        manager.step(0.0)
    placed = sorted(p.spec.node_name or "" for p in store.list(Pod, namespace="research").items)
    assert placed == ["h1", "h2"]
