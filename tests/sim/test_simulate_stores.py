"""`gpufleet simulate` keeps its world in a MemoryStore; the SQLite store (given a state directory)
must decide exactly the same: every job's start, end, restarts and lost work, and the faults drawn."""

from __future__ import annotations

from pathlib import Path

from test_simulate_smoke import synthetic_trace

from gpufleet.api.runtime import Pod, Workload
from gpufleet.api.training import TrainingJob
from gpufleet.sim import jobfleet, jobsim, philly
from gpufleet.store import SqliteStore


def _decisions(result: jobsim.SimResult) -> dict[str, tuple[float | None, float | None, int, float]]:
    return {n: (r.start, r.end, r.restarts, r.lost_gpu_seconds) for n, r in result.jobs.items()}


def test_the_memory_and_sqlite_stores_decide_the_same(tmp_path: Path) -> None:
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 60))
    pools = jobfleet.fleet_of_gpus(32)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    options = jobsim.SimOptions(checkpoint_interval=600.0, gpu_mtbf_seconds=4 * 3600.0, seed=3)
    in_memory = jobsim.simulate(trace, pools, queues, options=options)
    on_file = jobsim.simulate(trace, pools, queues, options=options, state_dir=tmp_path / "state")
    assert (tmp_path / "state" / "gpufleet.db").exists()  # the SQLite store ran, in the directory given
    assert sum(r.restarts for r in in_memory.jobs.values()) > 0  # failures restarted jobs
    assert _decisions(in_memory) == _decisions(on_file)
    assert in_memory.faults == on_file.faults and in_memory.cycles == on_file.cycles


def test_a_finished_job_leaves_nothing_in_the_store(tmp_path: Path) -> None:
    """Once recorded, a finished job goes with its Workload and pods: the store holds only live work."""
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 30))
    pools = jobfleet.fleet_of_gpus(32)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    result = jobsim.simulate(trace, pools, queues, state_dir=tmp_path / "state")
    assert len(result.jobs) > 0 and all(r.end is not None for r in result.jobs.values())
    with SqliteStore.open(tmp_path / "state") as store:
        for kind in (TrainingJob, Workload, Pod):
            assert store.list(kind).items == [], kind.__name__
