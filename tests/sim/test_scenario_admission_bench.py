"""Smoke size of `gpufleet bench admission`: it runs, admits, preempts and reports its keys."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.sim.admission import run


def test_admission_benchmark_smoke() -> None:
    result = run(queues=8, workloads=400, nodes=40, arrivals=20).to_dict()
    assert {"queues", "workloads", "decisions_per_s", "p99_preemption_ms"} <= set(result)
    assert result["queues"] == 8 and result["workloads"] == 400
    assert 0 < result["admitted"] < 400  # arrivals exceed capacity
    assert result["preemption_cycles"] > 0


def test_no_preemption_is_no_latency_not_zero() -> None:
    result = run(queues=8, workloads=50, nodes=40, arrivals=0).to_dict()
    assert result["preemption_cycles"] == 0
    assert result["p50_preemption_ms"] is None and result["p99_preemption_ms"] is None
    out = CliRunner().invoke(
        app, ["bench", "admission", "--queues", "8", "--workloads", "50", "--nodes", "40", "--arrivals", "0"]
    )
    assert out.exit_code == 0, out.output
    assert "n/a" in out.stdout


@pytest.mark.parametrize(("option", "value"), [("--queues", "0"), ("--workloads", "-5"), ("--nodes", "0")])
def test_out_of_range_options_are_usage_errors(option: str, value: str) -> None:
    out = CliRunner().invoke(app, ["bench", "admission", option, value])
    assert out.exit_code == 2 and option in out.output


def test_the_benchmark_runs_what_users_get_unless_told() -> None:
    assert run(queues=8, workloads=50, nodes=40, arrivals=0).policy == SchedulerConfig().policy_for("batch")
    assert run(queues=8, workloads=50, nodes=40, arrivals=0, policy="bestfit").policy == "bestfit"


def test_a_cycle_that_raised_stops_the_benchmark(
    placement_bug: Callable[[Callable[[str], bool]], dict[str, bool]],
) -> None:
    placement_bug(lambda name: name.endswith("7"))
    with pytest.raises(OverflowError, match="a number placement cannot take"):
        run(queues=8, workloads=50, nodes=40, arrivals=0)
