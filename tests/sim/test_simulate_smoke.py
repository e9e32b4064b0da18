"""`gpufleet simulate` at a smoke size: a few hundred synthetic jobs through the real control plane.

Invariants: every job finishes exactly once, no GPU is held by two pods at once and no more GPUs are
held than the fleet has, goodput never exceeds utilisation, and no job completes faster than its work.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from gpufleet.controllers.eventview import EventFedView
from gpufleet.controllers.manager import ControllerManager
from gpufleet.sim import jobfleet, jobreport, jobsim, philly
from gpufleet.twin.twin import Twin

CLUSTERS = ("aa11", "bb22", "cc33")


def synthetic_trace(path: Path, jobs: int, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    start = datetime(2017, 10, 1, tzinfo=UTC).timestamp()
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    submit = start
    for _ in range(jobs):
        submit += float(rng.exponential(40.0))
        gpus = int(rng.choice([1, 1, 1, 2, 4, 8, 16]))
        duration = float(rng.integers(60, 3600))
        stamp = datetime.fromtimestamp(submit, UTC).strftime(philly.TIME_FORMAT)
        rows.append(f"{stamp},{duration},{gpus},{gpus * duration},{CLUSTERS[int(rng.integers(3))]}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def run(
    tmp_path: Path, jobs: int, gpus: int, options: jobsim.SimOptions, *, spot: bool = False
) -> jobsim.SimResult:
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", jobs))
    pools = jobfleet.fleet_of_gpus(gpus, spot=spot)
    if options.policy == "fifo":
        queues = jobfleet.fifo_queues(pools)
    else:
        queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    return jobsim.simulate(trace, pools, queues, options=options)


def check_invariants(result: jobsim.SimResult) -> None:
    records = list(result.jobs.values())
    assert len(records) == len(result.trace.jobs)
    assert all(r.end is not None and r.start is not None for r in records)
    assert not result.double_booked
    assert result.peak_allocated <= result.capacity
    for r in records:
        assert r.end is not None and r.start is not None
        assert r.end - r.submit >= r.job.duration - 1e-6
        assert r.start >= r.submit
    util, good = jobreport.utilisation_series(result)
    assert (util <= 1 + 1e-9).all()
    assert (good <= util + 1e-9).all()
    # Free GPUs on partly used nodes are free GPUs: never more than the fleet minus what is held.
    fragmented = result.series.means("fragmented", result.buckets) / result.capacity
    assert (fragmented <= 1 - util + 1e-9).all()
    assert (fragmented >= -1e-9).all()
    summary = jobreport.summarise(result)
    assert summary.finished == len(records)
    assert 0 < summary.goodput <= summary.utilisation <= 1
    assert summary.jct_p50 <= summary.jct_p99


def test_every_job_runs_once_to_completion(tmp_path: Path) -> None:
    result = run(tmp_path, 120, 64, jobsim.SimOptions())
    check_invariants(result)
    # The load exceeds the fleet at times: some jobs wait, and the queues are all used.
    summary = jobreport.summarise(result)
    assert summary.wait_p99 > 0
    assert 0 < summary.fragmented < 1
    # Restarts here are reclaims of borrowed quota (preemption, gpufleet's default): without
    # checkpoints every one throws away all the work of its attempt, and goodput says so.
    if summary.restarts:
        assert summary.goodput < summary.utilisation
    assert {r[0] for r in jobreport.queue_shares(result) if r[1] > 0} == {f"vc-{c}" for c in CLUSTERS}


def test_a_simulation_touches_no_prometheus_series(tmp_path: Path) -> None:
    # Stopped while jobs run (no drain): a TrainingJob of `gpufleet up` would have its series now, and
    # its scheduler would have counted its cycles and admissions.
    options = jobsim.SimOptions(checkpoint_interval=600.0, drain=False)
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 30))
    pools = jobfleet.fleet_of_gpus(64)
    cycles = REGISTRY.get_sample_value("gpufleet_scheduling_cycles_total")
    binds = REGISTRY.get_sample_value("gpufleet_bind_duration_seconds_count")
    result = jobsim.simulate(
        trace, pools, jobfleet.trace_queues(trace.gpu_demand(), pools), days=0.01, options=options
    )
    running = [r for r in result.jobs.values() if r.start is not None and r.end is None]
    assert running and result.cycles
    assert REGISTRY.get_sample_value("gpufleet_scheduling_cycles_total") == cycles
    assert REGISTRY.get_sample_value("gpufleet_bind_duration_seconds_count") == binds
    for record in running:
        labels = {"namespace": record.queue, "trainingjob": record.job.name}
        assert REGISTRY.get_sample_value("gpufleet_trainingjob_restarts", labels) is None
        admitted = {"queue": record.queue, "flavor": "H100-80GB"}
        assert REGISTRY.get_sample_value("gpufleet_admissions_total", admitted) is None
        assert REGISTRY.get_sample_value("gpufleet_queue_used_gpus", admitted) is None


def test_failures_restart_jobs_from_their_checkpoints(tmp_path: Path) -> None:
    options = jobsim.SimOptions(checkpoint_interval=600.0, gpu_mtbf_seconds=600.0, seed=3)
    result = run(tmp_path, 80, 64, options)
    check_invariants(result)
    summary = jobreport.summarise(result)
    assert result.faults.get("GpuFailure", 0) > 0
    assert summary.restarts > 0
    assert summary.lost_gpu_hours > 0
    assert summary.goodput < summary.utilisation
    # A restarted job resumes from its checkpoint: it never loses more than an interval per restart.
    for r in result.jobs.values():
        if r.restarts:
            gpus = r.job.gpus
            assert r.lost_gpu_seconds <= r.restarts * gpus * 600.0 + 1e-6


def test_node_losses_and_spot_interruptions_on_a_spot_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The event log is emptied after every instant: every reader has read it to its end by then, so
    # none lists the store again after its start (a reader left behind would, or stop the run).
    lists: list[str] = []
    for cls, name in ((EventFedView, "relist"), (ControllerManager, "_resync"), (Twin, "_resync")):
        original = getattr(cls, name)

        def counted(self: object, *args: object, _original: Any = original, _name: str = name) -> object:
            lists.append(f"{type(self).__name__}.{_name}")
            return _original(self, *args)

        monkeypatch.setattr(cls, name, counted)
    options = jobsim.SimOptions(
        checkpoint_interval=600.0, node_mtbf_seconds=1800.0, spot_interruptions_per_day=4.0, seed=5
    )
    result = run(tmp_path, 60, 64, options, spot=True)
    assert sorted(lists) == [
        "ControllerManager._resync",
        "JobView.relist",
        "PoolView.relist",
        "Twin._resync",
    ]
    check_invariants(result)
    assert result.faults.get("NodeLoss", 0) > 0
    assert result.faults.get("SpotInterruption", 0) > 0
    assert jobreport.summarise(result).restarts > 0


def test_fifo_baseline_starts_jobs_in_submission_order_and_never_preempts(tmp_path: Path) -> None:
    result = run(tmp_path, 80, 64, jobsim.SimOptions(policy="fifo"))
    check_invariants(result)
    records = sorted(result.jobs.values(), key=lambda r: (r.submit, r.job.line))
    starts = [r.start for r in records]
    assert starts == sorted(starts)  # type: ignore[type-var]
    assert jobreport.summarise(result).restarts == 0
    assert {r.queue for r in records} == {"fifo"}
    assert jobreport.summarise(result).wait_p99 > 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cli_writes_the_report(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    trace = synthetic_trace(tmp_path / "trace.csv", 60)
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(trace), "--gpus", "64", "--start-day", "0", "--report", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "60 jobs (60 finished) on 64 GPUs" in result.output
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "JCT mean / p50 / p99" in text and "vc-aa11" in text
    for name in ("utilisation.png", "queue.png", "jct_cdf.png", "shares.png", "fragmentation.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
