"""Elastic training jobs: admitted short, grown at a checkpoint when room frees, shrunk by preemption."""

from __future__ import annotations

from gpufleet.api.runtime import Pod

from .conftest import World

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 4}
"""

BLOCKER = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: blocker}
spec:
  priorityClass: research
  replicas: 2
  worker: {gpus: 8}
  durationSeconds: 1000
"""

ELASTIC = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: big}
spec:
  priorityClass: research
  replicas: 4
  minReplicas: 2
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 600}
  restartPolicy: {maxRestarts: 0, backoffSeconds: 0}
  durationSeconds: 4000
"""

URGENT = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: urgent}
spec:
  priorityClass: production-training
  replicas: 2
  worker: {gpus: 8}
  durationSeconds: 1000
"""


def _workers(world: World, job: str) -> list[Pod]:
    return [p for p in world.store.list(Pod) if p.metadata.labels.get("gpufleet.io/training-job") == job]


def test_elastic_job_starts_short_and_grows_at_the_next_checkpoint(world: World) -> None:
    world.apply(FLEET)
    world.apply(BLOCKER)
    world.runtime.run_for(1)
    world.apply(ELASTIC)
    world.runtime.run_for(1)
    job = world.get("TrainingJob", "big")
    assert job.status.phase == "Running" and job.status.replicas == 2
    world.runtime.run_for(1100)  # the blocker ends at 1000; big checkpoints at 1200 s of half-speed work
    assert world.get("TrainingJob", "big").status.replicas == 2
    world.runtime.run_for(200)  # the checkpoint at 1201 (600 s of work): restarted at full size
    job = world.get("TrainingJob", "big")
    assert job.status.phase == "Running" and job.status.replicas == 4, job.status
    assert job.status.restarts == 0 and job.status.lost_gpu_seconds == 0
    assert len([p for p in _workers(world, "big") if p.status.phase == "Running"]) == 4
    # 600 s of work done at half speed, 3400 left at full speed.
    world.runtime.run_for(3250)
    assert world.get("TrainingJob", "big").status.phase == "Running"
    world.runtime.run_for(100)
    assert world.get("TrainingJob", "big").status.phase == "Succeeded"


def test_preemption_shrinks_an_elastic_job_which_slows_down_without_a_restart(world: World) -> None:
    world.apply(FLEET)
    world.apply(ELASTIC)
    world.runtime.run_for(1)
    assert world.get("TrainingJob", "big").status.replicas == 4
    world.runtime.run_for(999)  # 1000 s of work at full speed
    world.apply(URGENT)
    world.runtime.run_for(1)
    assert world.get("TrainingJob", "urgent").status.phase == "Running"
    job = world.get("TrainingJob", "big")
    assert job.status.phase == "Running" and job.status.replicas == 2, job.status
    assert job.status.restarts == 0
    assert world.get("Workload", "job-big").status.evictions == []
    # At half speed the checkpoints of 1200 and 1800 s of work come at 1400 and 2600 s; urgent is done
    # at 2000 s, so the job is back to full size at the second one.
    world.runtime.run_for(1500)
    assert world.get("TrainingJob", "big").status.replicas == 2
    world.runtime.run_for(200)
    job = world.get("TrainingJob", "big")
    assert job.status.replicas == 4, job.status
    assert job.status.restarts == 0 and job.status.lost_gpu_seconds == 0
    # 1800 s of work by 2600 s, the remaining 2200 s at full speed.
    world.runtime.run_for(2050)
    assert world.get("TrainingJob", "big").status.phase == "Running"
    world.runtime.run_for(100)
    assert world.get("TrainingJob", "big").status.phase == "Succeeded"
