"""Queue status: waiting and admitted workloads and GPUs in use per flavor, subtree included."""

from __future__ import annotations

from .conftest import World

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: org}
spec: {quotas: {H100-80GB: {nominal: 0}}}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec: {parent: org, quotas: {H100-80GB: {nominal: 16}}}
"""


def _job(name: str, gpus: int, seconds: int) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec: {{queue: team, replicas: 1, worker: {{gpus: {gpus}}}, durationSeconds: {seconds}}}
"""


def test_queue_status_counts_workloads_and_usage_and_is_written_only_on_change(world: World) -> None:
    world.apply(FLEET)
    world.apply(_job("a", 8, 600))
    world.apply(_job("b", 4, 1200))
    world.apply(_job("c", 8, 600))  # 20 GPUs asked of a 16-GPU quota: c waits
    world.runtime.run_for(1)
    team = world.get("Queue", "team").status
    assert (team.pending_workloads, team.admitted_workloads) == (1, 2)
    assert team.usage == {"H100-80GB": 12.0}
    org = world.get("Queue", "org").status
    assert (org.pending_workloads, org.admitted_workloads, org.usage) == (1, 2, {"H100-80GB": 12.0})
    version = world.get("Queue", "team").metadata.resource_version
    world.runtime.run_for(300)  # nothing moves: no write
    assert world.get("Queue", "team").metadata.resource_version == version
    world.runtime.run_for(400)  # a is done at 600 s and c takes its place
    team = world.get("Queue", "team").status
    assert (team.pending_workloads, team.admitted_workloads, team.usage) == (0, 2, {"H100-80GB": 12.0})
    world.runtime.run_for(1200)
    team = world.get("Queue", "team").status
    assert (team.pending_workloads, team.admitted_workloads, team.usage) == (0, 0, {})
