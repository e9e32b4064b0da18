"""The FGD protocol on tiny synthetic traces, and a smoke run of `gpufleet bench fgd`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.sim.fgd import arrived_pct, node_rank, run_once, workload
from gpufleet.sim.openb import TracePod


def tiny_trace() -> tuple[list[NodeSpec], list[TracePod]]:
    nodes = [NodeSpec(f"n{i}", "T4", 4, 32_000, 65_536) for i in range(4)]
    shapes = [
        PodRequest(2_000, 1_024, gpu_milli=500),
        PodRequest(4_000, 1_024, gpus=1),
        PodRequest(1_000, 512),
    ]
    pods = [TracePod(f"p{i:03d}", shapes[i % 3]) for i in range(12)]
    return nodes, pods


def test_workload_is_resized_to_the_tuning_ratio_and_seeded() -> None:
    _, pods = tiny_trace()
    cluster = 16_000
    stream = workload(pods, cluster, seed=3)
    total = sum(p.request.total_gpu_milli for p in stream)
    assert 1.3 * cluster - 1_000 < total <= 1.3 * cluster
    assert [p.name for p in stream] == [p.name for p in workload(pods, cluster, seed=3)]
    assert [p.name for p in stream] != [p.name for p in workload(pods, cluster, seed=4)]
    shrunk = workload(pods, 2_000, seed=0)
    assert sum(p.request.total_gpu_milli for p in shrunk) <= 2_600


def test_arrived_pct_rounds_half_up() -> None:
    assert arrived_pct(6_212_000 * 995 // 1000, 6_212_000) == 100
    assert arrived_pct(6_212_000 * 994 // 1000, 6_212_000) == 99


@pytest.mark.parametrize("policy", ["random", "bestfit", "packing", "clustering", "dotprod", "fgd", "fgd+"])
def test_protocol_run_accounts_every_gpu(policy: str) -> None:
    nodes, pods = tiny_trace()
    result = run_once(nodes, pods, policy, seed=1)
    assert 0.0 <= result.unallocated_pct <= 100.0
    assert result.placed <= result.pods
    # With 16 GPUs and 1.3x arrivals, the cluster ends nearly full; allocation never decreases.
    values = [result.curve[k] for k in sorted(result.curve)]
    assert values == sorted(values)
    assert max(values) > 80.0


def test_node_order_is_a_permutation_drawn_per_seed() -> None:
    first = node_rank(50, seed=0)
    assert first is not None and sorted(first.tolist()) == list(range(50))
    again = node_rank(50, seed=0)
    other = node_rank(50, seed=1)
    assert again is not None and other is not None
    assert again.tolist() == first.tolist() and other.tolist() != first.tolist()
    assert node_rank(50, seed=0, tie_break="random") is None
    with pytest.raises(ValueError, match="node-order"):
        node_rank(50, seed=0, tie_break="first")


@pytest.mark.parametrize("tie_break", ["node-order", "random"])
def test_protocol_runs_are_reproducible_per_seed_under_either_tie_break(tie_break: str) -> None:
    nodes, pods = tiny_trace()
    runs = [run_once(nodes, pods, "packing", seed=2, tie_break=tie_break) for _ in range(2)]
    assert runs[0].curve == runs[1].curve


def test_fragmentation_aware_policies_beat_random_on_a_share_heavy_trace() -> None:
    nodes = [NodeSpec(f"n{i}", "T4", 2, 64_000, 262_144) for i in range(30)]
    rng = np.random.default_rng(0)
    pods = []
    for i in range(120):
        # 700 and 300 shares pair up exactly on one GPU; a random policy rarely pairs them.
        shape = [PodRequest(4_000, 1_024, gpus=1), PodRequest(2_000, 1_024, gpu_milli=700)]
        shape.append(PodRequest(2_000, 1_024, gpu_milli=300))
        request = shape[int(rng.choice(3, p=[0.2, 0.4, 0.4]))]
        pods.append(TracePod(f"p{i:03d}", request))
    random = np.mean([run_once(nodes, pods, "random", s).unallocated_pct for s in range(3)])
    plus = np.mean([run_once(nodes, pods, "fgd+", s).unallocated_pct for s in range(3)])
    assert plus < random


def test_bench_fgd_cli_smoke(tmp_path: Path) -> None:
    csv_dir = tmp_path / "alibaba-gpu-v2023" / "csv"
    csv_dir.mkdir(parents=True)
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"] + [
        f"n{i},64000,262144,{2 + 2 * (i % 2)},T4" for i in range(40)
    ]
    (csv_dir / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    for i in range(300):
        num, milli = [(0, 0), (1, 1000), (1, 450), (2, 1000)][i % 4]
        rows.append(f"p{i:04d},{2000 + 500 * (i % 5)},4096,{num},{milli},")
    (csv_dir / "openb_pod_list_smoke.csv").write_text("\n".join(rows) + "\n")
    plot = tmp_path / "plot.png"
    args = ["bench", "fgd", "--trace", "smoke", "--policy", "bestfit,fgd+", "--seeds", "1"]
    args += ["--json", "--workers", "1", "--data", str(tmp_path), "--plot", str(plot)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in lines] == ["bestfit", "fgd+"]
    for record in lines:
        assert set(record) == {
            "trace",
            "policy",
            "seeds",
            "unallocated_pct",
            "unallocated_std",
            "published_pct",
            "wall_s",
        }
        assert record["trace"] == "smoke" and record["seeds"] == 1 and record["published_pct"] is None
        assert 0 <= record["unallocated_pct"] <= 100
    assert plot.stat().st_size > 0


def test_bench_fgd_rejects_an_unknown_tie_break() -> None:
    result = CliRunner().invoke(app, ["bench", "fgd", "--tie-break", "first", "--seeds", "1"])
    assert result.exit_code != 0
    assert "node-order" in result.output


def test_bench_fgd_reports_an_unknown_policy(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "fgd", "--policy", "nope", "--seeds", "1"])
    assert result.exit_code != 0


def test_bench_fgd_takes_processes_as_simulate_does_and_refuses_a_negative_count() -> None:
    result = CliRunner().invoke(app, ["bench", "fgd", "--processes", "-2", "--seeds", "1"])
    assert result.exit_code == 2
    assert "--processes" in result.output and "-2" in result.output
    helped = CliRunner().invoke(app, ["bench", "fgd", "--help"], env={"COLUMNS": "200"})
    assert "--processes" in helped.output and "--workers" in helped.output
