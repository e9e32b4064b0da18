"""An elastic job on an autoscaled spot pool gets a replacement for a node taken back, and grows back."""

from __future__ import annotations

from gpufleet.api.runtime import Node, Pod, Workload
from gpufleet.twin.twin import SpotInterruption

from .conftest import World

L4_SPOT = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: l4}
spec:
  gpuModel: L4
  gpusPerNode: 8
  capacityType: spot
  pricePerGPUHour: 0.4
  autoscaling: {minNodes: 0, maxNodes: 3, scaleDownDelaySeconds: 300}
"""

ELASTIC = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: tune}
spec:
  replicas: 3
  minReplicas: 1
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 300}
  restartPolicy: {maxRestarts: 5, backoffSeconds: 0}
  durationSeconds: 100000
"""


def _running_workers(world: World) -> list[Pod]:
    return [p for p in world.store.list(Pod) if p.status.phase == "Running"]


def test_an_interrupted_spot_node_is_replaced_and_the_elastic_job_grows_back(world: World) -> None:
    world.apply(L4_SPOT)
    world.apply(ELASTIC)
    world.runtime.run_for(1200)
    job = world.get("TrainingJob", "tune")
    assert job.status.phase == "Running" and job.status.replicas == 3, job.status
    assert job.status.last_checkpoint is not None
    doomed = "l4-1"
    assert doomed in {p.spec.node_name for p in _running_workers(world)}

    world.twin.inject(SpotInterruption(node=doomed))
    world.runtime.run_for(130)  # past the two-minute notice: the node is gone
    job = world.get("TrainingJob", "tune")
    assert job.status.replicas == 2 and job.status.phase == "Running", job.status
    assert job.status.restarts == 1  # restarted from the checkpoint the notice made, at the size that fits
    nodes = {n.name for n in world.store.list(Node)}
    assert doomed not in nodes
    assert len(nodes) == 3, nodes  # a replacement is on its way while the job runs short

    world.runtime.run_for(900)  # the new node comes up; the next checkpoint restarts the job at full size
    job = world.get("TrainingJob", "tune")
    assert job.status.phase == "Running" and job.status.replicas == 3, job.status
    assert len(_running_workers(world)) == 3
    (workload,) = world.store.list(Workload).items
    assert workload.status.node_demand is None  # full size again: nothing more is asked of the pool
