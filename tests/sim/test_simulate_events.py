"""`gpufleet simulate` drops the Events its controllers record (validated, counted by reason, not kept)
unless told `--keep-events`; either way every decision is the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_simulate_smoke import synthetic_trace
from typer.testing import CliRunner

from gpufleet.api.runtime import Event
from gpufleet.sim import jobfleet, jobsim, philly
from gpufleet.store import SqliteStore


def _decisions(result: jobsim.SimResult) -> dict[str, tuple[float | None, float | None, int, float]]:
    return {n: (r.start, r.end, r.restarts, r.lost_gpu_seconds) for n, r in result.jobs.items()}


def _run(tmp_path: Path, options: jobsim.SimOptions, state: str) -> tuple[jobsim.SimResult, int]:
    """The run, and how many Events its state directory holds afterwards."""
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 60))
    pools = jobfleet.fleet_of_gpus(32)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    result = jobsim.simulate(trace, pools, queues, options=options, state_dir=tmp_path / state)
    with SqliteStore.open(tmp_path / state) as store:
        return result, len(store.list(Event).items)


def test_events_are_dropped_by_default_and_kept_when_asked_with_the_same_decisions(tmp_path: Path) -> None:
    options = jobsim.SimOptions(checkpoint_interval=600.0, gpu_mtbf_seconds=4 * 3600.0, seed=3)
    dropped, dropped_stored = _run(tmp_path, options, "dropped")
    kept, kept_stored = _run(tmp_path, dataclasses.replace(options, keep_events=True), "kept")
    assert _decisions(dropped) == _decisions(kept)
    assert dropped.faults == kept.faults and dropped.cycles == kept.cycles
    assert sum(r.restarts for r in dropped.jobs.values()) > 0  # failures happened: more than admissions
    assert dropped_stored == 0 and kept.events == {}
    # Every Event that was kept was recorded and counted when dropped, by its reason.
    assert kept_stored == sum(dropped.events.values()) > 2 * len(dropped.jobs)
    assert dropped.events.get("Admitted", 0) >= len(dropped.jobs)


def test_cli_keep_events_reaches_the_simulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.cli.main import app

    seen: list[bool] = []
    real = jobsim.simulate

    def spy(*args: object, **kwargs: object) -> jobsim.SimResult:
        options = kwargs["options"]
        assert isinstance(options, jobsim.SimOptions)
        seen.append(options.keep_events)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jobsim, "simulate", spy)
    trace = synthetic_trace(tmp_path / "trace.csv", 20)
    base = ["simulate", "--trace", str(trace), "--gpus", "64", "--start-day", "0", "--json"]
    for extra in ([], ["--keep-events", "--state-dir", str(tmp_path / "kept")]):
        result = CliRunner().invoke(app, [*base, *extra])
        assert result.exit_code == 0, result.output
    assert seen == [False, True]
