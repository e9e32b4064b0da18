"""Claim (a)'s sweep runs windows longer than the committed 12 h trace (benchmarks/claims/failures_sweep.py):
its gangs must still compute through the whole window and the fill backlog must last it, else a 7-day
run would measure an emptying fleet instead of failures."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from gpufleet.sim import philly

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "claims" / "failures_sweep.py"


def sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("failures_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_twelve_hour_window_uses_the_committed_trace(tmp_path: Path) -> None:
    module = sweep()
    assert module.trace_for(4096, 0.5, tmp_path) == module.trace_file(4096)
    assert not list(tmp_path.iterdir())


def test_a_seven_day_window_gets_gangs_and_fill_work_for_seven_days(tmp_path: Path) -> None:
    window = 7 * 86400
    for gang in (4096, 8192):
        jobs = philly.load(sweep().trace_for(gang, 7.0, tmp_path)).jobs
        gangs = [j for j in jobs if j.cluster == "train"]
        fill = [j for j in jobs if j.cluster == "fill"]
        assert len(gangs) * gang == 6 * 4096
        assert all(j.duration > window for j in gangs)
        # fill nodes x 6 h jobs must cover the window: (25,000 - gang GPUs) / 8 - 5 spares nodes
        fill_nodes = (25_000 - 6 * 4096) // 8 - 5
        assert sum(j.duration for j in fill) >= fill_nodes * window
