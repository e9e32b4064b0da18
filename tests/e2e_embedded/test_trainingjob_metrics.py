"""The embedded world exports the control plane's series from its own controllers: a TrainingJob's
(`jobstate.record_metrics`, as the operator does), dropped with the job, and its pool's price and GPUs."""

from __future__ import annotations

from prometheus_client import REGISTRY

from gpufleet.api.runtime import Pod
from gpufleet.api.training import TrainingJob
from gpufleet.twin.twin import NodeLoss

from .conftest import World

OBJECTS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: metrics-pool}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, pricePerGPUHour: 2.5}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: metered, namespace: team-m}
spec:
  replicas: 1
  worker: {gpus: 4}
  checkpoint: {intervalSeconds: 300}
  durationSeconds: 7200
"""
JOB = {"namespace": "team-m", "trainingjob": "metered"}


def test_a_running_jobs_series_are_exported_and_dropped_with_it(world: World) -> None:
    binds = REGISTRY.get_sample_value("gpufleet_bind_duration_seconds_count") or 0.0
    world.apply(OBJECTS)
    world.runtime.run_for(120)
    # Its one worker pod was created bound, and timed.
    assert REGISTRY.get_sample_value("gpufleet_bind_duration_seconds_count") == binds + 1
    job = world.get("TrainingJob", "metered", "team-m")
    assert job.status.phase == "Running"
    assert REGISTRY.get_sample_value("gpufleet_trainingjob_restarts", JOB) == 0
    assert REGISTRY.get_sample_value("gpufleet_trainingjob_checkpoint_interval_seconds", JOB) == 300
    at = REGISTRY.get_sample_value("gpufleet_trainingjob_last_checkpoint_timestamp_seconds", JOB)
    assert at is not None and at <= world.now
    # The pool's price, and its GPUs by state and by queue, from the same process.
    pool = {"pool": "metrics-pool"}
    assert REGISTRY.get_sample_value("gpufleet_pool_gpu_hour_price", pool) == 2.5
    assert (
        REGISTRY.get_sample_value("gpufleet_gpus", {**pool, "model": "H100-80GB", "state": "allocated"}) == 4
    )
    assert REGISTRY.get_sample_value("gpufleet_gpus", {**pool, "model": "H100-80GB", "state": "idle"}) == 4
    assert REGISTRY.get_sample_value("gpufleet_queue_pool_gpus", {**pool, "queue": job.spec.queue}) == 4
    world.store.delete(TrainingJob, "metered", "team-m")
    world.runtime.run_for(10)
    assert REGISTRY.get_sample_value("gpufleet_trainingjob_restarts", JOB) is None


def test_a_lost_node_counts_one_eviction_of_the_jobs_run_by_its_reason(world: World) -> None:
    world.apply(OBJECTS)
    world.runtime.run_for(60)
    job = world.get("TrainingJob", "metered", "team-m")
    evicted = {"queue": job.spec.queue, "reason": "NodeLost"}
    before = REGISTRY.get_sample_value("gpufleet_evictions_total", evicted) or 0.0
    (pod,) = [p for p in world.store.list(Pod).items if not p.terminated]
    assert pod.spec.node_name is not None
    world.twin.inject(NodeLoss(node=pod.spec.node_name))
    world.runtime.run_for(10)
    assert world.get("TrainingJob", "metered", "team-m").status.restarts == 1
    assert REGISTRY.get_sample_value("gpufleet_evictions_total", evicted) == before + 1
