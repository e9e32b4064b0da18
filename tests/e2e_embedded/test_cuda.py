"""CUDA versions in the embedded world: jobs wait for a driver that runs them, and start on one."""

from __future__ import annotations

import pytest

from gpufleet.api.errors import ValidationError

from .conftest import World

POOL = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: {name}}}
spec: {{gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1{extra}}}
"""

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm}
spec:
  replicas: 1
  worker: {gpus: 8, cudaVersion: "12.8"}
  durationSeconds: 600
"""


def pool(name: str, driver: str | None = None, autoscaling: bool = False) -> str:
    extra = f", driverVersion: {driver}" if driver else ""
    if autoscaling:
        extra += ", autoscaling: {minNodes: 0, maxNodes: 4}"
    return POOL.format(name=name, extra=extra)


def test_a_job_waits_for_a_driver_that_runs_its_cuda_version_then_starts_on_it(world: World) -> None:
    world.apply(pool("old", "470.82.01"))
    world.runtime.run_for(5)
    world.apply(JOB)
    world.runtime.run_for(5)
    job = world.get("TrainingJob", "llm", "default")
    assert job.status.phase == "Pending"
    reason = job.status.pending_reason
    assert reason is not None and reason.type == "NoFit", reason
    assert "CUDA 12.8" in reason.message and "525.60.13" in reason.message, reason.message
    # The job takes the pool's flavor, so the newest driver named is that of its GPU model's nodes.
    assert "the newest driver on a node of model H100-80GB is 470.82.01" in reason.message, reason.message

    world.apply(pool("new", "570.124.06"))
    world.runtime.run_for(30)
    job = world.get("TrainingJob", "llm", "default")
    assert job.status.phase == "Running", job.status
    pods = [p for p in world.store.list("Pod") if p.spec.workload == "job-llm"]
    assert [p.spec.node_name for p in pods] == ["new-0"]


def test_a_pool_that_states_no_driver_runs_any_cuda_version(world: World) -> None:
    world.apply(pool("plain"))
    world.apply(JOB)
    world.runtime.run_for(30)
    assert world.get("TrainingJob", "llm", "default").status.phase == "Running"


def test_an_autoscaled_pool_with_an_old_driver_makes_no_node_for_the_job(world: World) -> None:
    # At one price pools are tried by name: "aged" would come first, but its driver runs no 13.x.
    world.apply(pool("aged", "575.57.08", autoscaling=True))
    world.apply(pool("fresh", "580.65.06", autoscaling=True))
    world.apply(JOB.replace('"12.8"', '"13.0"'))
    world.runtime.run_for(120)
    assert world.get("TrainingJob", "llm", "default").status.phase == "Running"
    made = sorted(n.name for n in world.store.list("Node"))
    assert made == ["fresh-0"], made


def test_a_malformed_cuda_version_is_refused_with_the_field_named(world: World) -> None:
    where = r"TrainingJob default/llm: field spec\.worker\.cudaVersion: '12' is not a CUDA version"
    with pytest.raises(ValidationError, match=where):
        world.apply(JOB.replace('"12.8"', '"12"'))
