"""Spot interruptions, pool autoscaling from zero, preemption, and a restart of the control plane."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api.runtime import Node, Pod
from gpufleet.twin.twin import NodeLoss, SpotInterruption

from .conftest import World, make_world

SPOT = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: spot}
spec: {gpuModel: A100-80GB, gpusPerNode: 8, nodes: 2, capacityType: spot, pricePerGPUHour: 1.2}
"""

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: ft}
spec:
  replicas: 1
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 900}
  restartPolicy: {maxRestarts: 2, backoffSeconds: 0}
  durationSeconds: 3600
"""

AUTOSCALED = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: burst}
spec:
  gpuModel: H100-80GB
  gpusPerNode: 8
  pricePerGPUHour: 3.0
  autoscaling: {minNodes: 0, maxNodes: 4, scaleDownDelaySeconds: 600}
"""


def test_spot_interruption_checkpoints_moves_the_job_and_replaces_the_node(world: World) -> None:
    world.apply(SPOT)
    world.apply(JOB)
    world.runtime.run_for(1000)  # a checkpoint at 900, then 100 s more work
    pod = world.store.list(Pod).items[0]
    doomed = pod.spec.node_name
    world.twin.inject(SpotInterruption(node=doomed))
    world.runtime.run_for(1)
    job = world.get("TrainingJob", "ft")
    # The notice made the twin checkpoint at once, so the restart lost (almost) nothing.
    assert job.status.restarts == 1
    assert job.status.last_checkpoint.step == 1000
    assert job.status.lost_gpu_seconds < 8 * 2
    assert job.status.phase == "Running"
    assert world.store.list(Pod).items[0].spec.node_name != doomed
    world.runtime.run_for(130)  # past the two-minute notice: the node is gone and replaced
    names = {n.name for n in world.store.list(Node)}
    assert doomed not in names and len(names) == 2
    assert all(n.status.phase == "Ready" for n in world.store.list(Node))
    world.runtime.run_for(2700)
    assert world.get("TrainingJob", "ft").status.phase == "Succeeded"


def test_node_loss_beyond_max_restarts_fails_the_job(world: World) -> None:
    world.apply(SPOT)
    world.apply(JOB)
    for _ in range(3):
        world.runtime.run_for(10)
        node = world.store.list(Pod).items[0].spec.node_name
        world.twin.inject(NodeLoss(node=node))
    world.runtime.run_for(10)
    job = world.get("TrainingJob", "ft")
    assert job.status.phase == "Failed", job.status
    running = next(c for c in job.status.conditions if c.type == "Running")
    assert (running.status, running.reason) == ("False", "Failed")
    assert job.status.restarts == 3
    assert not world.store.list(Pod).items or all(p.terminated for p in world.store.list(Pod))


def test_pool_scales_up_from_zero_and_down_after_the_delay(world: World) -> None:
    world.apply(AUTOSCALED)
    world.runtime.run_for(60)
    assert world.store.list(Node).items == []
    world.apply(
        JOB.replace("replicas: 1", "replicas: 2").replace("durationSeconds: 3600", "durationSeconds: 600")
    )
    world.runtime.run_for(5)
    nodes = world.store.list(Node).items
    assert len(nodes) == 2, [n.name for n in nodes]
    assert world.get("TrainingJob", "ft").status.phase == "Running"
    world.runtime.run_for(700)  # the job is done at 600 s; the nodes idle
    assert world.get("TrainingJob", "ft").status.phase == "Succeeded"
    assert len(world.store.list(Node).items) == 2  # not before the scale-down delay
    world.runtime.run_for(600)
    assert world.store.list(Node).items == []
    pool = world.get("GPUPool", "burst")
    # Two nodes of 8 GPUs idle for about the 600 s delay (the job ran on all 16 GPUs before).
    assert 2.5 <= pool.status.idle_gpu_hours <= 3.5
    assert abs(pool.status.idle_cost - pool.status.idle_gpu_hours * 3.0) < 0.01


PREEMPT = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: low}
spec:
  priorityClass: research
  replicas: 1
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 300}
  restartPolicy: {backoffSeconds: 0}
  durationSeconds: 3600
"""

HIGH = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: high}
spec:
  priorityClass: production-training
  replicas: 1
  worker: {gpus: 8}
  durationSeconds: 600
"""


def test_preemption_records_the_cause_and_the_victim_resumes_later(world: World) -> None:
    world.apply(PREEMPT)
    world.runtime.run_for(400)  # low checkpointed at 300
    world.apply(HIGH)
    world.runtime.run_for(1)
    assert world.get("TrainingJob", "high").status.phase == "Running"
    low = world.get("TrainingJob", "low")
    assert low.status.phase == "Pending" and low.status.restarts == 1
    assert 8 * 95 <= low.status.lost_gpu_seconds <= 8 * 105
    workload = world.get("Workload", "job-low")
    assert workload.status.evictions[0].reason == "Preempted"
    assert workload.status.evictions[0].preemptor == "default/job-high"
    world.runtime.run_for(700)
    assert world.get("TrainingJob", "high").status.phase == "Succeeded"
    assert world.get("TrainingJob", "low").status.phase == "Running"


def test_restart_on_the_same_store_keeps_every_gpu_allocated_once(tmp_path: Path) -> None:
    first = make_world(tmp_path)
    first.apply(PREEMPT.replace("nodes: 1", "nodes: 2"))
    first.apply(HIGH)
    first.runtime.run_for(100)
    before = sorted((p.spec.node_name, tuple(p.spec.gpus)) for p in first.store.list(Pod))
    clock = first.clock
    first.store.close()  # the process dies; a new one opens the same state directory

    second = make_world(tmp_path, clock=clock)
    second.apply(JOB.replace("name: ft", "name: late"))  # wants 8 GPUs; none is free
    second.runtime.run_for(1)
    after = sorted((p.spec.node_name, tuple(p.spec.gpus)) for p in second.store.list(Pod))
    assert after == before
    assert second.get("TrainingJob", "late").status.pending_reason.type in ("NoFit", "WaitingForPreemption")
    second.runtime.run_for(4500)  # late (3600 s) starts when high (600 s) is done
    assert second.get("TrainingJob", "high").status.phase == "Succeeded"
    assert second.get("TrainingJob", "low").status.phase == "Succeeded"
    assert second.get("TrainingJob", "late").status.phase == "Succeeded"
    second.store.close()
