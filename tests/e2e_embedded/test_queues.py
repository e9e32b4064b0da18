"""Queue status: waiting and admitted workloads and GPUs in use per flavor, subtree included."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api import Queue, load_objects
from gpufleet.controllers.plane import build_manager
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

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


def test_queue_status_at_most_once_an_interval_catches_up_at_its_end(tmp_path: Path) -> None:
    # The job simulator's setting: nothing reads queue status there, so it is written at most
    # hourly; what changed meanwhile is written at the end of the hour, not lost.
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)
    manager = build_manager(store, queue_status_seconds=3600)
    runtime = Runtime(store, clock=clock, participants=[Twin(store, clock=clock), manager])
    for obj in load_objects(FLEET + "---" + _job("a", 8, 7200) + "---" + _job("b", 4, 1200)):
        store.apply(obj)
    runtime.run_for(1)
    written = [store.get(Queue, "team").metadata.resource_version]
    for _ in range(11):
        runtime.run_for(300)  # b finishes at 1200 s: a change, not written before 3600 s
        written.append(store.get(Queue, "team").metadata.resource_version)
    assert len(set(written)) == 1  # up to 3301 s
    runtime.run_for(300)
    team = store.get(Queue, "team").status
    assert (team.pending_workloads, team.admitted_workloads, team.usage) == (0, 1, {"H100-80GB": 8.0})
    store.close()
