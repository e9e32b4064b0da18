"""Random faults at configured rates (fixed seed): they happen about as often as asked, and every job
still ends, succeeded or failed past its restart limit."""

from __future__ import annotations

from pathlib import Path

from gpufleet.twin.config import FaultRates, TwinConfig

from .conftest import make_world

HOURS = 24
GPU_RATE = 0.02  # per GPU-hour
NODE_RATE = 0.03  # per node-hour
SPOT_RATE = 0.1  # per spot node-hour

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: steady}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 6, pricePerGPUHour: 3.0}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: cheap}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 4, capacityType: spot, pricePerGPUHour: 1.0}
"""


def _job(index: int) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: job-{index}}}
spec:
  replicas: {1 + index % 2}
  worker: {{gpus: 8}}
  checkpoint: {{intervalSeconds: 900}}
  restartPolicy: {{maxRestarts: 6, backoffSeconds: 60}}
  durationSeconds: {7200 + 1800 * (index % 4)}
"""


def test_faults_come_at_about_the_configured_rates_and_every_job_ends(tmp_path: Path) -> None:
    rates = FaultRates(
        gpu_failures_per_gpu_hour=GPU_RATE,
        node_losses_per_node_hour=NODE_RATE,
        spot_interruptions_per_node_hour=SPOT_RATE,
        gpu_repair_seconds=1800,
        seed=11,
    )
    world = make_world(tmp_path, config=TwinConfig(faults=rates))
    world.apply(FLEET)
    for index in range(12):
        world.apply(_job(index))
    world.runtime.run_for(HOURS * 3600)

    faults = world.twin.faults
    expected_gpu = GPU_RATE * 10 * 8 * HOURS  # 38.4
    expected_node = NODE_RATE * 10 * HOURS  # 7.2
    expected_spot = SPOT_RATE * 4 * HOURS  # 9.6
    assert 0.6 * expected_gpu <= faults["GpuFailure"] <= 1.5 * expected_gpu, faults
    assert 0.3 * expected_node <= faults["NodeLoss"] <= 2.5 * expected_node, faults
    assert 0.3 * expected_spot <= faults["SpotInterruption"] <= 2.5 * expected_spot, faults

    jobs = world.store.list("TrainingJob").items
    phases = {job.name: job.status.phase for job in jobs}
    assert set(phases.values()) <= {"Succeeded", "Failed"}, phases
    assert sum(job.status.restarts for job in jobs) > 0
    for job in jobs:
        if job.status.phase == "Failed":
            assert job.status.restarts == 7  # past maxRestarts, not for another reason
    world.store.close()
