"""The baselines of `gpufleet simulate` on the same trace: FIFO without preemption and Tiresias'
discretised least attained service (a queueing strategy of the scheduling core, run through the same
controllers)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from test_simulate_smoke import check_invariants

from gpufleet.sim import jobfleet, jobreport, jobsim, philly


def long_then_short(path: Path) -> Path:
    """Four 8-GPU jobs of 6 hours fill a 32-GPU fleet; then 24 one-GPU jobs of 10 minutes arrive."""
    start = datetime(2017, 10, 1, tzinfo=UTC).timestamp()
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    jobs = [(start + i, 6 * 3600.0, 8) for i in range(4)]
    jobs += [(start + 600 + 60 * i, 600.0, 1) for i in range(24)]
    for at, duration, gpus in jobs:
        stamp = datetime.fromtimestamp(at, UTC).strftime(philly.TIME_FORMAT)
        rows.append(f"{stamp},{duration},{gpus},{gpus * duration},aa11")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def run(tmp_path: Path, policy: str) -> jobsim.SimResult:
    trace = philly.load(long_then_short(tmp_path / "trace.csv"))
    pools = jobfleet.fleet_of_gpus(32)
    queues = jobfleet.baseline_queues(policy, pools)
    assert queues is not None
    options = jobsim.SimOptions(policy=policy, checkpoint_interval=600.0)
    return jobsim.simulate(trace, pools, queues, options=options)


def short_jct(result: jobsim.SimResult) -> float:
    return float(np.mean([r.end - r.submit for r in result.jobs.values() if r.job.gpus == 1 and r.end]))


def test_least_attained_service_lets_short_jobs_past_long_ones(tmp_path: Path) -> None:
    fifo = run(tmp_path, "fifo")
    las = run(tmp_path, "las")
    for result in (fifo, las):
        check_invariants(result)
    assert {r.queue for r in las.jobs.values()} == {"las"}
    # Under FIFO the short jobs wait for a long job to end (6 hours); under LAS the long jobs, past
    # the first level's GPU-hour, are preempted for them.
    assert short_jct(fifo) > 5 * 3600
    assert short_jct(las) < 3600
    assert jobreport.summarise(las).restarts > 0
    assert jobreport.summarise(fifo).restarts == 0
