"""A trace row's own checkpoint interval (`checkpoint_interval` column): read with clear errors, it
overrides the run's interval for that job, and a restarted job loses at most its own interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.errors import DataError
from gpufleet.api.training import TrainingJob
from gpufleet.sim import jobfleet, jobsim, philly
from gpufleet.store.memory import MemoryStore

HEADER = "timestamp,duration,num_gpus,cluster,checkpoint_interval\n"


def write(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_the_column_overrides_the_runs_interval_per_job(tmp_path: Path) -> None:
    trace = philly.load(
        write(
            tmp_path,
            [
                "2017-10-01 00:00:00,600,8,a,",
                "2017-10-01 00:00:01,600,8,a,0",
                "2017-10-01 00:00:02,600,8,a,90.5",
            ],
        )
    )
    assert [j.checkpoint_interval for j in trace.jobs] == [None, 0.0, 90.5]
    with_default = jobsim.SimOptions(checkpoint_interval=1800.0)
    without = jobsim.SimOptions()

    def interval(job: philly.TraceJob, options: jobsim.SimOptions) -> float | None:
        policy = jobsim.training_job(job, options).spec.checkpoint
        return None if policy is None else policy.interval_seconds

    assert [interval(j, with_default) for j in trace.jobs] == [1800.0, None, 90.5]
    assert [interval(j, without) for j in trace.jobs] == [None, None, 90.5]


@pytest.mark.parametrize("value", ["-5", "soon", "inf", "nan", "1e999", "0.5", "1e-9"])
def test_a_bad_interval_names_the_line_and_column(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, ["2017-10-01 00:00:00,600,8,a,60", f"2017-10-01 00:00:01,600,8,a,{value}"])
    with pytest.raises(DataError) as caught:
        philly.load(path)
    assert f"{path}:3" in str(caught.value)
    assert "checkpoint_interval" in str(caught.value) and "(0: never)" in str(caught.value)


def test_each_job_loses_at_most_its_own_interval_on_a_failure(tmp_path: Path) -> None:
    # Two-hour 8-GPU jobs on a fleet whose GPUs fail often; odd rows checkpoint every 5 minutes, even
    # rows never (and the run has no interval of its own).
    rows = [f"2017-10-01 00:{i:02d}:00,7200,8,a,{300 if i % 2 else 0}" for i in range(16)]
    trace = philly.load(write(tmp_path, rows))
    pools = jobfleet.fleet_of_gpus(64)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    options = jobsim.SimOptions(gpu_mtbf_seconds=900.0, seed=4)
    result = jobsim.simulate(trace, pools, queues, options=options)
    assert all(r.end is not None for r in result.jobs.values())
    checkpointing = [r for r in result.jobs.values() if r.job.checkpoint_interval]
    never = [r for r in result.jobs.values() if not r.job.checkpoint_interval]
    assert sum(r.restarts for r in checkpointing) > 0 and sum(r.restarts for r in never) > 0
    for r in checkpointing:
        assert r.lost_gpu_seconds <= r.restarts * 8 * 300.0 + 1e-6
    # Without checkpoints a failure throws away the whole attempt, far more than five minutes' work.
    assert max(r.lost_gpu_seconds / r.restarts for r in never if r.restarts) > 8 * 300.0


def test_the_feeders_jobs_are_those_a_whole_build_gives(tmp_path: Path) -> None:
    """The feeder validates a shape's spec once and gives each job of it its own duration: what it
    submits (and the store keeps) is what building each job whole gives, shape by shape."""
    trace = philly.load(
        write(
            tmp_path,
            [
                "2017-10-01 00:00:00,600,8,a,",
                "2017-10-01 00:00:01,75.5,8,a,",
                "2017-10-01 00:00:02,600,8,b,",
                "2017-10-01 00:00:03,600,12,a,",
                "2017-10-01 00:00:04,31,1,a,90.5",
                "2017-10-01 00:00:05,32,1,a,",
                "2017-10-01 00:00:06,33,1,a,90.5",
            ],
        )
    )
    options = jobsim.SimOptions(checkpoint_interval=1800.0)
    store = MemoryStore()
    feeder = jobsim.Feeder(store, trace.jobs, trace.start, options, lambda job, now: None)
    feeder.step(trace.start + 10)
    assert len(feeder.specs) == 5, "one spec per queue, size and interval"
    for job in trace.jobs:
        built = jobsim.training_job(job, options)
        stored = store.get(TrainingJob, job.name, built.namespace)
        assert stored.spec == built.spec
        assert stored.spec.duration_seconds == job.duration
