"""Every file in scenarios/ runs through the scheduler and meets its expectations (`make test`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.sim.scenario import load_scenarios, run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
LOADED = load_scenarios([SCENARIOS])


def test_there_are_enough_scenarios() -> None:
    assert len(LOADED) >= 40


@pytest.mark.parametrize("item", LOADED, ids=lambda item: item.name)
def test_scenario(item) -> None:  # type: ignore[no-untyped-def]
    outcome = run_scenario(item)
    assert outcome.passed, "\n".join(outcome.failures)


def test_cli_runs_the_directory_once() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "scenario", "run", str(SCENARIOS), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(lines) == len(LOADED)
    assert all(set(line) >= {"name", "passed", "failures"} and line["passed"] for line in lines)
