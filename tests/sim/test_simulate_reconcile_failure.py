"""A simulation whose control plane fails a reconcile stops and says so: the manager would go on
with the other objects, but the run's figures would no longer be what the control plane decides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.controllers.pools import PoolController
from gpufleet.sim import jobfleet, jobsim, philly


def _trace(tmp_path: Path) -> philly.Trace:
    path = tmp_path / "trace.csv"
    rows = [f"2017-10-09 07:{minute:02d}:00,600,1,vc{minute % 2}" for minute in range(20)]
    path.write_text("timestamp,duration,num_gpus,cluster\n" + "\n".join(rows) + "\n")
    return philly.load(path)


@pytest.mark.contained_failures
def test_a_failed_reconcile_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    pools = jobfleet.fleet_of_gpus(16)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)

    def broken(self: PoolController, key: tuple[str, str], now: float) -> float | None:
        raise ZeroDivisionError("a bug in the pool controller")

    monkeypatch.setattr(PoolController, "reconcile", broken)
    with pytest.raises(RuntimeError, match=r"failure\(s\) of the control plane"):
        jobsim.simulate(trace, pools, queues)


@pytest.mark.contained_failures
def test_a_placement_that_raises_stops_the_run(
    tmp_path: Path, placement_bug: Callable[[Callable[[str], bool]], dict[str, bool]]
) -> None:
    # The workload it raises on waits out of the queue and the others run: without the count, the run
    # would finish with figures of a fleet that never ran that job.
    trace = _trace(tmp_path)
    pools = jobfleet.fleet_of_gpus(16)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    placement_bug(lambda name: name.endswith("-j5"))
    with pytest.raises(RuntimeError, match=r"failure\(s\) of the control plane"):
        jobsim.simulate(trace, pools, queues)
