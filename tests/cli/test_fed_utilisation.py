"""`gpufleet bench federation --utilisation` at a smoke size: one seeded job stream on three clusters
under a manager and on one cluster of the same total size, both on the twin, with the utilisation of
each and the gap between them."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpufleet.cli.fedbench_utilisation import SHAPES, stream
from gpufleet.cli.main import app


def test_one_stream_runs_federated_and_on_one_cluster() -> None:
    args = ["--utilisation", "--nodes", "2", "--workloads", "24", "--mean-seconds", "60", "--json"]
    result = CliRunner().invoke(app, ["bench", "federation", *args])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["clusters"] == 3 and figures["gpus"] == 48 and figures["jobs"] == 24
    federated, single = figures["federated_utilisation_pct"], figures["single_cluster_utilisation_pct"]
    # demand is 1.2 times the fleet: both keep most GPUs busy, and every cluster of the federation works
    assert 40 < federated <= 100 and 40 < single <= 100
    assert figures["gap_points"] == round(single - federated, 2)
    assert figures["target_met"] == (figures["gap_points"] <= 2.0)


def test_the_stream_is_seeded_and_asks_the_load_it_is_given() -> None:
    first = stream(400, 384, load=1.2, mean_seconds=300, seed=3)
    assert first == stream(400, 384, load=1.2, mean_seconds=300, seed=3)
    assert first != stream(400, 384, load=1.2, mean_seconds=300, seed=4)
    assert all((a.workers, a.gpus) in SHAPES for a in first)
    asked = sum(a.workers * a.gpus * a.duration for a in first) / first[-1].at
    assert 0.9 * 1.2 * 384 < asked < 1.5 * 1.2 * 384, "GPU-seconds asked per second, about load x GPUs"
