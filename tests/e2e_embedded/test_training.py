"""A training job's life in the embedded world, on a virtual clock."""

from __future__ import annotations

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.runtime import Node, Pod
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import GpuFailure

from .conftest import World

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec:
  gpuModel: H100-80GB
  gpusPerNode: 8
  nodes: 4
  topology: {block: b1, racks: 2}
  nodeResources: {cpu: 192, memory: 2Ti}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  quotas:
    H100-80GB: {nominal: 32}
"""

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team-a}
spec:
  queue: team-a
  priorityClass: production-training
  replicas: 2
  worker: {gpus: 8, gpuModel: H100-80GB, cpu: 32, memory: 256Gi}
  topology: {required: rack}
  checkpoint: {intervalSeconds: 600, uri: s3://ckpt/llm}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 30}
  durationSeconds: 3600
"""


def test_nodes_come_up_with_topology_labels(world: World) -> None:
    world.apply(FLEET)
    world.runtime.run_for(1)
    nodes = world.store.list(Node).items
    assert [n.name for n in nodes] == ["h100-0", "h100-1", "h100-2", "h100-3"]
    assert all(n.status.phase == "Ready" for n in nodes)
    assert [n.metadata.labels["rack"] for n in nodes] == ["b1-r0", "b1-r1", "b1-r0", "b1-r1"]
    pool = world.get("GPUPool", "h100")
    assert pool.status.ready_nodes == 4 and pool.status.gpus == 32


def test_job_runs_checkpoints_survives_gpu_failure_and_succeeds(world: World) -> None:
    world.apply(FLEET)
    world.runtime.run_for(1)
    world.apply(JOB)
    world.runtime.run_for(1)
    job = world.get("TrainingJob", "llm", "team-a")
    assert job.status.phase == "Running", job.status
    pods = world.store.list(Pod, namespace="team-a").items
    assert len(pods) == 2
    racks = {world.get("Node", p.spec.node_name).metadata.labels["rack"] for p in pods}
    assert len(racks) == 1  # topology: required rack

    world.runtime.run_for(1500)  # checkpoints at 600 and 1200 of progress
    job = world.get("TrainingJob", "llm", "team-a")
    assert job.status.last_checkpoint is not None and job.status.last_checkpoint.step == 1200

    victim = pods[0].spec.node_name
    world.twin.inject(GpuFailure(node=victim, gpu=pods[0].spec.gpus[0]))
    world.runtime.run_for(1)
    job = world.get("TrainingJob", "llm", "team-a")
    assert job.status.restarts == 1
    # Two workers of 8 GPUs lost ~300 s of work since the checkpoint at 1200.
    assert 16 * 295 <= job.status.lost_gpu_seconds <= 16 * 305
    assert job.status.phase == "Pending" and job.status.pending_reason.type == "Backoff"
    node = world.get("Node", victim)
    assert node.spec.unschedulable

    world.runtime.run_for(40)  # backoff 30 s, then placed again away from the cordoned node
    job = world.get("TrainingJob", "llm", "team-a")
    assert job.status.phase == "Running"
    new_nodes = {p.spec.node_name for p in world.store.list(Pod, namespace="team-a")}
    assert victim not in new_nodes

    # 2400 s of work left from step 1200; it finishes about 2400 s after the restart.
    world.runtime.run_for(2300)
    assert world.get("TrainingJob", "llm", "team-a").status.phase == "Running"
    world.runtime.run_for(200)
    job = world.get("TrainingJob", "llm", "team-a")
    assert job.status.phase == "Succeeded", job.status
    conditions = {c.type: (c.status, c.reason) for c in job.status.conditions}
    # A finished job no longer says it runs.
    assert conditions["Succeeded"] == ("True", "Completed")
    assert conditions["Running"] == ("False", "Completed")
    assert job.status.restarts == 1
    steps = sorted(c.spec.step for c in world.store.list(Checkpoint, namespace="team-a"))
    assert steps == [600, 1200, 1800, 2400, 3000]
    # The GPUs are free again: every workload is out of the scheduler's cache.
    sched = world.manager.controllers[0]
    assert not sched.cache.admitted


class LateFault:
    """Stands for the HTTP API on the wall clock: once the twin has written the checkpoint at 1200,
    the clock moves on while the runtime still works through that instant, and a GPU failure arrives."""

    def __init__(self, world: World, fault: GpuFailure) -> None:
        self.world = world
        self.fault: GpuFailure | None = fault

    def step(self, now: float) -> float | None:
        steps = {c.spec.step for c in self.world.store.list(Checkpoint, namespace="team-a")}
        if self.fault is not None and 1200 in steps:
            self.world.clock.advance_to(now + 1)
            self.world.twin.inject(self.fault)
            self.fault = None
        return None


def test_a_fault_arriving_after_a_checkpoint_at_the_same_instant_loses_the_work_since(world: World) -> None:
    world.apply(FLEET)
    world.runtime.run_for(1)
    world.apply(JOB)
    world.runtime.run_for(1100)
    pod = world.store.list(Pod, namespace="team-a").items[0]
    late = LateFault(world, GpuFailure(node=pod.spec.node_name, gpu=pod.spec.gpus[0]))
    runtime = Runtime(world.store, clock=world.clock, participants=[world.twin, world.manager, late])
    runtime.run_for(200)
    job = world.get("TrainingJob", "llm", "team-a")
    assert job.status.restarts == 1
    assert job.status.last_checkpoint is not None and job.status.last_checkpoint.step == 1200
    # The failure came a second after the checkpoint: two workers of 8 GPUs lost that second.
    assert job.status.lost_gpu_seconds == 16
