"""Smoke run of the throughput benchmark: the streams run, place what they should and report every key."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.sim.throughput import ThroughputConfig, build_fleet, run_throughput


def test_synthetic_fleet_topology() -> None:
    state = build_fleet(ThroughputConfig(nodes=300))
    assert list(state.free_whole_gpus_in("block")) == [256 * 8, 44 * 8]
    assert len(state.free_whole_gpus_in("rack")) == 10
    assert state.domain_name(1, 9) == "b1/r9"


def test_smoke_run_places_every_stream_and_keeps_the_fleet_sound() -> None:
    config = ThroughputConfig(nodes=320, pods=400, gangs=20, share_pods=300, seed=3)
    result = run_throughput(config)
    assert result.pods_placed == 400 and result.share_placed == 300
    assert (result.pods_rejected, result.share_rejected) == (0, 0)
    assert result.gangs_rejected == 20 - result.gangs_placed
    assert result.gangs_placed >= 15 and result.gang_pods_placed >= 2 * result.gangs_placed
    assert result.placed_total == result.pods_placed + result.gang_pods_placed + result.share_placed
    assert result.pods_per_s > 0 and result.p99_gang_ms >= result.p50_gang_ms > 0
    assert result.peak_rss_mib > 0


def test_streams_not_given_scale_with_the_fleet() -> None:
    full = ThroughputConfig.for_fleet(5000)
    assert (full.pods, full.gangs, full.share_pods, full.resident_share_pods) == (
        50_000,
        2000,
        50_000,
        30_000,
    )
    small = ThroughputConfig.for_fleet(64, gangs=3)
    assert (small.pods, small.gangs, small.share_pods, small.resident_share_pods) == (640, 3, 640, 384)
    # At the scaled size the share stream places what it tries, so its rate is one of placements.
    result = run_throughput(ThroughputConfig.for_fleet(64, gangs=20, seed=1))
    assert result.share_pods == 640 and result.share_rejected == 0 and result.pods_rejected == 0


def test_same_seed_same_decisions() -> None:
    config = ThroughputConfig(nodes=300, pods=200, gangs=10, share_pods=100, seed=7)
    a, b = run_throughput(config), run_throughput(config)
    assert (a.gangs_placed, a.gang_pods_placed, a.placed_total) == (
        b.gangs_placed,
        b.gang_pods_placed,
        b.placed_total,
    )


def test_cli_json_has_the_documented_keys() -> None:
    out = CliRunner().invoke(
        app,
        [
            "bench",
            "throughput",
            "--nodes",
            "300",
            "--pods",
            "300",
            "--gangs",
            "10",
            "--share-pods",
            "100",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    row = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("nodes", "pods_per_s", "gangs_per_s", "p99_gang_ms", "peak_rss_mib", "share_rejected"):
        assert key in row
    assert row["nodes"] == 300


def test_cli_table() -> None:
    out = CliRunner().invoke(
        app, ["bench", "throughput", "--nodes", "300", "--pods", "100", "--gangs", "5", "--share-pods", "50"]
    )
    assert out.exit_code == 0, out.output
    assert "1-GPU pods" in out.stdout and "gangs" in out.stdout and "share pods" in out.stdout
