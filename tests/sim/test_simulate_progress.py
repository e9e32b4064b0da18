"""Where a simulation stands: a progress bar of the jobs finished and the simulated day on a terminal,
a line every 10 s elsewhere, and a last line when Ctrl-C stops it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpufleet.cli.simulate import _progress_bar
from gpufleet.sim import heap, jobfleet, jobsim, philly


def _world(tmp_path: Path) -> tuple[Any, Any, Any]:
    path = tmp_path / "trace.csv"
    rows = [f"2017-10-09 07:{minute:02d}:00,600,1,vc{minute % 2}" for minute in range(20)]
    path.write_text("timestamp,duration,num_gpus,cluster\n" + "\n".join(rows) + "\n")
    trace = philly.load(path)
    pools = jobfleet.fleet_of_gpus(16)
    return trace, pools, jobfleet.trace_queues(trace.gpu_demand(), pools)


def test_a_meter_follows_the_run_and_takes_the_place_of_the_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, pools, queues = _world(tmp_path)
    monkeypatch.setattr(jobsim, "METER_SECONDS", 0.0)  # a reading at every settle
    readings: list[jobsim.SimProgress] = []
    said: list[str] = []
    result = jobsim.simulate(trace, pools, queues, progress=said.append, meter=readings.append)
    assert readings and not said
    assert all(r.jobs == 20 for r in readings)
    days = [r.day for r in readings]
    finished = [r.finished for r in readings]
    assert days == sorted(days) and finished == sorted(finished) and 0 < finished[-1] <= 20
    assert len(result.jobs) == 20


def test_the_bar_is_drawn_on_a_terminal_only() -> None:
    plain = Console(file=io.StringIO(), force_terminal=False)
    with _progress_bar(plain) as meter:
        assert meter is None
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, width=100)
    with _progress_bar(terminal) as meter:
        assert meter is not None
        meter(jobsim.SimProgress(day=1.25, finished=3, jobs=8, wall_seconds=1.0))
    assert "simulated day 1.25" in out.getvalue() and "3/8" in out.getvalue()


def test_an_interrupted_run_says_how_far_it_got(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace, pools, queues = _world(tmp_path)
    tick = heap.FrozenHeap.tick

    def interrupted(self: heap.FrozenHeap) -> None:
        tick(self)
        if self.ticks == 12:  # Ctrl-C, part-way through the run
            raise KeyboardInterrupt

    monkeypatch.setattr(heap.FrozenHeap, "tick", interrupted)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        jobsim.simulate(trace, pools, queues, progress=said.append)
    assert len(said) == 1 and said[0].startswith("interrupted at day 0.0")
    finished = int(said[0].split(": ")[1].split("/")[0])
    assert 0 <= finished < 20 and said[0].endswith("nothing reported")
