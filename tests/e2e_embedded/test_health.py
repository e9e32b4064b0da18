"""Health: a node with a failed GPU is cordoned and its pods evicted; repaired, it takes work again."""

from __future__ import annotations

from gpufleet.api.runtime import Pod
from gpufleet.twin.twin import GpuFailure, GpuRepair

from .conftest import World

OBJECTS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: solo}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: ft}
spec:
  replicas: 1
  worker: {gpus: 4}
  checkpoint: {intervalSeconds: 300}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 10}
  durationSeconds: 1200
"""


def test_a_repaired_node_is_uncordoned_and_the_evicted_job_returns_to_it(world: World) -> None:
    world.apply(OBJECTS)
    world.runtime.run_for(400)
    pod = world.store.list(Pod).items[0]
    spare_gpu = next(g for g in range(8) if g not in pod.spec.gpus)
    # A failed GPU the job does not use still cordons the node and evicts what runs there.
    world.twin.inject(GpuFailure(node="solo-0", gpu=spare_gpu))
    world.runtime.run_for(60)
    node = world.get("Node", "solo-0")
    assert node.spec.unschedulable
    job = world.get("TrainingJob", "ft")
    assert job.status.phase == "Pending" and job.status.restarts == 1
    assert world.get("Workload", "job-ft").status.evictions[0].reason == "NodeUnhealthy"
    world.twin.inject(GpuRepair(node="solo-0", gpu=spare_gpu))
    world.runtime.run_for(1)
    assert not world.get("Node", "solo-0").spec.unschedulable
    job = world.get("TrainingJob", "ft")
    assert job.status.phase == "Running" and job.status.last_checkpoint.step == 300
    world.runtime.run_for(1000)  # 900 s of work left from the checkpoint
    assert world.get("TrainingJob", "ft").status.phase == "Succeeded"
