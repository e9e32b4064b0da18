"""`gpufleet bench federation` at a smoke size: one JSON object, every workload decided once, none
dispatched twice, no cluster sent more than it reported free, and the figures the targets read."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpufleet.cli.main import app


def test_the_federation_benchmark_runs_small_and_reports_json() -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "federation", "--clusters", "3", "--nodes", "64", "--workloads", "400", "--json"],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["clusters"] == 3 and figures["gpus"] == 3 * 64 * 8
    assert figures["dispatched"] + sum(figures["not_dispatched"].values()) == 400
    assert figures["dispatched"] > 200, "most of a light stream fits"
    assert figures["dispatched_twice"] == 0 and figures["overcommitted_decisions"] == 0
    assert 0 < figures["dispatch_p50_ms"] <= figures["dispatch_p99_ms"] <= figures["dispatch_max_ms"]
    assert figures["dispatched_per_second"] > 0 and isinstance(figures["target_p99_met"], bool)


def test_a_fleet_too_small_for_the_stream_says_why_work_stays() -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "federation",
            "--clusters",
            "2",
            "--nodes",
            "8",
            "--workloads",
            "300",
            "--heartbeat-every",
            "1000",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["not_dispatched"].get("NoCluster", 0) > 0, "no report frees anything: the fleet fills"
    assert figures["overcommitted_decisions"] == 0
