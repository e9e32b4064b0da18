"""`GpufleetCheckpointOverdue` against a real Prometheus when the world's clock runs ahead of the wall
clock: `gpufleet up --time-scale 30`. The checkpoint times are fleet time; the rule takes their age on
the control plane's own clock (`gpufleet_clock_timestamp_seconds`), so a job is overdue when it is by
fleet time, and no longer once it checkpoints, while Prometheus' `time()` is half an hour behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from .promharness import (
    PROMETHEUS,
    SKIP_REASON,
    Prometheus,
    free_port,
    has,
    reachable,
    start_prometheus,
    start_up,
    stop,
    wait,
)

SCALE = 30
# One 8-GPU node runs one of the elastic job's two workers: the job computes at half speed, so it
# checkpoints every 600 s of fleet time (20 s of wall time) against its 300 s interval, overdue for the
# second half of each period.
FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: scaled}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, pricePerGPUHour: 3.0}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  quotas: {H100-80GB: {nominal: 16}}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team-a}
spec:
  queue: team-a
  replicas: 2
  minReplicas: 1
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 300, uri: s3://ckpt/llm}
  durationSeconds: 86400000
"""


@pytest.mark.slow
def test_checkpoint_overdue_is_judged_on_the_world_s_clock(run_dir: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip(SKIP_REASON)
    state = run_dir / "state"
    api_port, web_port = free_port(), free_port()
    server = f"http://127.0.0.1:{api_port}"
    log = run_dir / "prometheus.log"
    up = start_up(run_dir, FLEET, time_scale=SCALE, port=api_port)
    prom = None
    try:
        wait(
            "gpufleet up", lambda: (state / "admin-token").exists() and reachable(server), run_dir / "up.log"
        )
        # No agent here: its target is a port nothing listens on.
        prom = start_prometheus(run_dir, api_port=api_port, agent_port=free_port(), web_port=web_port)
        p = Prometheus(web_port)
        wait("the job's worker", lambda: p.value('sum(gpufleet_gpus{state="allocated"})') == 8, log)
        job = 'namespace="team-a",trainingjob="llm"'
        wait(
            "its checkpoint series",
            lambda: p.value(f"count(gpufleet_trainingjob_checkpoint_interval_seconds{{{job}}})") == 1,
            log,
        )
        # The world runs ahead of Prometheus: measured on time(), a checkpoint is in the future. The
        # series starts at the job's admission, only seconds ahead of time(); a busy machine's scrape can
        # see time() pass it before the first checkpoint (20 s of wall time at full speed) moves it.
        ahead = f"max(gpufleet_trainingjob_last_checkpoint_timestamp_seconds{{{job}}}) - time()"
        wait("a checkpoint ahead of time()", lambda: (p.value(ahead) or 0) > 60, log)
        overdue = {"namespace": "team-a", "trainingjob": "llm"}
        wait(
            "GpufleetCheckpointOverdue",
            lambda: has(p.firing(), "GpufleetCheckpointOverdue", **overdue),
            log,
            seen=p.firing,
        )
        wait(
            "the next checkpoint",
            lambda: not has(p.firing(), "GpufleetCheckpointOverdue", **overdue),
            log,
            seen=p.firing,
        )
    finally:
        if prom is not None:
            stop(prom)
        stop(up)
