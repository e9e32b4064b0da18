"""Inference services: autoscaling on the twin's daily traffic, and rollouts without downtime."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.api.accounting import service_gpu_hours
from gpufleet.api.runtime import Pod

from .conftest import World

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: l4}
spec: {gpuModel: L4, gpusPerNode: 4, nodes: 4}
"""

SERVICE = """
apiVersion: gpufleet.io/v1alpha1
kind: ModelVersion
metadata: {name: chat-v1, namespace: serving}
spec: {model: chat, version: v1, uri: s3://models/chat/v1}
---
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: serving}
spec:
  priorityClass: production-inference
  modelVersion: chat-v1
  replicas: {min: 2, max: 8}
  replica: {gpus: 1, gpuModel: L4}
  autoscaling: {targetRequestsPerReplica: 40, targetLatencyP99Ms: 400}
  rollout: {maxSurge: 1, maxUnavailable: 0}
"""

V2 = """
apiVersion: gpufleet.io/v1alpha1
kind: ModelVersion
metadata: {name: chat-v2, namespace: serving}
spec: {model: chat, version: v2, uri: s3://models/chat/v2}
"""


def ready_pods(world: World, revision: str | None = None) -> int:
    pods = world.store.list(Pod, namespace="serving").items
    return sum(
        1
        for p in pods
        if p.status.phase == "Running"
        and p.status.ready
        and (revision is None or p.metadata.labels.get("gpufleet.io/revision") == revision)
    )


def test_autoscales_up_at_the_daily_peak_and_back_down(world: World) -> None:
    world.apply(FLEET)
    world.apply(SERVICE)
    world.runtime.run_until(world.now + 4 * 3600)  # 04:00, night traffic (~20-40 rps)
    night = world.get("InferenceService", "chat", "serving").status
    assert night.desired_replicas == 2 and night.ready_replicas == 2, night
    world.runtime.run_until(world.now + 10 * 3600)  # 14:00, the peak (~200 rps)
    peak = world.get("InferenceService", "chat", "serving").status
    assert peak.desired_replicas >= 5, peak
    assert peak.ready_replicas >= 5
    world.runtime.run_until(world.now + 10 * 3600)  # 24:00, night again
    late = world.get("InferenceService", "chat", "serving").status
    assert late.desired_replicas <= 3, late
    assert ready_pods(world) == late.desired_replicas
    # Its cost: the replica count's history, as the integral its status keeps (1 GPU a replica), read
    # up to now. At least 2 replicas all day, more at the peak, never 8 all day.
    placed = [p for p in world.store.list(Pod, namespace="serving").items if p.spec.node_name]
    assert late.placed_gpus == len(placed)
    hours = service_gpu_hours(late.to_dict(), datetime.fromtimestamp(world.now, UTC))
    assert 2 * 23.5 < hours < 8 * 24, hours


def test_rollout_keeps_ready_replicas_at_desired(world: World) -> None:
    world.apply(FLEET)
    world.apply(SERVICE)
    world.runtime.run_for(120)
    assert ready_pods(world, "chat-v1") == 2
    world.apply(V2)
    world.apply(SERVICE.replace("modelVersion: chat-v1", "modelVersion: chat-v2"))
    lowest = 99
    for _ in range(240):
        world.runtime.run_for(1)
        lowest = min(lowest, ready_pods(world))
    assert lowest >= 2  # min 2 - maxUnavailable 0
    assert ready_pods(world, "chat-v2") == 2
    assert ready_pods(world, "chat-v1") == 0
    status = world.get("InferenceService", "chat", "serving").status
    rolled = next(c for c in status.conditions if c.type == "RolledOut")
    assert rolled.status == "True"
