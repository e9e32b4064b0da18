"""The lower bound of `gpufleet bench fgd --bound`: exact on hand-made fleets whose optimum is known,
never below a brute-force optimum, never above a policy's figure, and in the CLI only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import GPU_MILLI, PodRequest
from gpufleet.sim.fgd import run_once
from gpufleet.sim.fgd_bound import bound_once, dff, max_packing
from gpufleet.sim.openb import TracePod


def share(milli: int, cpu: int = 1_000, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(cpu, 1_024, gpu_milli=milli, gpu_models=models)


def whole(gpus: int, cpu: int = 1_000, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(cpu, 1_024, gpus=gpus, gpu_models=models)


KNOWN = [
    # Shares above 500 milli never share a GPU: two of three fit on two GPUs.
    ("shares above half a GPU", [NodeSpec("a", "T4", 2, 64_000, 65_536)], [share(600)] * 3, 1_200),
    # 700 + 300 fill a GPU; 400 then has nowhere to go.
    (
        "a pair that fills a GPU",
        [NodeSpec("a", "T4", 1, 64_000, 65_536)],
        [share(700), share(400), share(300)],
        1_000,
    ),
    # Pods that name T4 cannot use the P100 node.
    (
        "GPU model",
        [NodeSpec("a", "T4", 1, 64_000, 65_536), NodeSpec("b", "P100", 1, 64_000, 65_536)],
        [whole(1, models=("T4",))] * 3,
        1_000,
    ),
    # 10 CPUs feed only two pods of 4 CPUs, whatever the idle GPUs.
    ("CPU", [NodeSpec("a", "T4", 8, 10_000, 65_536)], [whole(1, cpu=4_000)] * 5, 2_000),
    # A 5-GPU pod takes more than half of an 8-GPU node: one per node.
    (
        "GPUs of a node",
        [NodeSpec(f"n{i}", "G2", 8, 96_000, 393_216) for i in range(2)],
        [whole(5)] * 3,
        10_000,
    ),
]


@pytest.mark.parametrize(("nodes", "pods", "optimum"), [k[1:] for k in KNOWN], ids=[k[0] for k in KNOWN])
def test_the_packing_bound_is_the_optimum_on_fleets_where_it_is_known(
    nodes: list[NodeSpec], pods: list[PodRequest], optimum: int
) -> None:
    result = max_packing(nodes, pods)
    assert result.exact
    assert result.milli == pytest.approx(optimum, abs=1.0)


def test_dual_feasible_rounds_never_let_two_halves_plus_share_a_bin() -> None:
    assert dff(600, 1_000, 1) == 1.0 and dff(500, 1_000, 1) == 0.5 and dff(400, 1_000, 1) == 0.0
    assert dff(400, 1_000, 2) == 0.5 and dff(700, 1_000, 2) == 1.0 and dff(200, 1_000, 2) == 0.0


def brute_force(nodes: list[NodeSpec], pods: list[PodRequest]) -> int:
    """The largest GPU milli of any subset of `pods` that fits `nodes`, by trying every placement."""
    free = [[GPU_MILLI] * n.gpus for n in nodes]
    cpu = [n.cpu_milli for n in nodes]
    best = 0

    def place(i: int, placed: int) -> None:
        nonlocal best
        best = max(best, placed)
        if i == len(pods):
            return
        pod = pods[i]
        place(i + 1, placed)  # leave it out
        for n, node in enumerate(nodes):
            if cpu[n] < pod.cpu_milli or (pod.gpu_models and node.gpu_model not in pod.gpu_models):
                continue
            if pod.gpus:
                idle = [g for g, f in enumerate(free[n]) if f == GPU_MILLI]
                choices = [tuple(idle[: pod.gpus])] if len(idle) >= pod.gpus else []
                need = GPU_MILLI
            else:
                choices = [(g,) for g, f in enumerate(free[n]) if f >= pod.gpu_milli]
                need = pod.gpu_milli
            for gpus in choices:
                cpu[n] -= pod.cpu_milli
                for g in gpus:
                    free[n][g] -= need
                place(i + 1, placed + pod.total_gpu_milli)
                for g in gpus:
                    free[n][g] += need
                cpu[n] += pod.cpu_milli

    place(0, 0)
    return best


def test_the_packing_bound_is_never_below_the_optimum_of_random_small_cases() -> None:
    rng = np.random.default_rng(7)
    shapes = [share(810), share(470), share(320), share(650), share(230), whole(1, cpu=6_000), whole(2)]
    shapes += [whole(1, models=("T4",)), share(600, models=("P100",))]
    tight = 0
    for _ in range(25):
        nodes = [
            NodeSpec(f"n{i}", str(rng.choice(["T4", "P100"])), int(rng.integers(1, 3)), 8_000, 65_536)
            for i in range(2)
        ]
        pods = [shapes[int(k)] for k in rng.integers(len(shapes), size=5)]
        optimum = brute_force(nodes, pods)
        bound = max_packing(nodes, pods).milli
        assert bound >= optimum - 1e-6, (nodes, pods)
        tight += bound <= optimum + 1.0
    assert tight >= 15  # mostly exact on such small cases, not merely above


def tiny_trace() -> tuple[list[NodeSpec], list[TracePod]]:
    nodes = [NodeSpec(f"n{i}", "T4", 4, 32_000, 65_536) for i in range(6)]
    shapes = [share(810, 2_000), whole(1, 4_000), PodRequest(1_000, 512), share(470, 2_000), whole(2, 8_000)]
    return nodes, [TracePod(f"p{i:03d}", shapes[i % len(shapes)]) for i in range(30)]


def test_no_policy_run_is_below_the_bound_and_the_bound_sees_share_waste() -> None:
    nodes, pods = tiny_trace()
    for seed in range(3):
        bound = bound_once(nodes, pods, seed)
        assert bound.exact and bound.seed == seed
        # 810-milli shares leave 190 milli that no pod of this trace can use.
        assert bound.unallocated_pct > 2.0
        for policy in ("fgd+", "bestfit", "random"):
            assert run_once(nodes, pods, policy, seed).unallocated_pct >= bound.unallocated_pct - 1e-9


def test_bench_fgd_bound_reports_each_policys_distance(tmp_path: Path) -> None:
    csv_dir = tmp_path / "alibaba-gpu-v2023" / "csv"
    csv_dir.mkdir(parents=True)
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"] + [f"n{i},64000,262144,4,T4" for i in range(20)]
    (csv_dir / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    for i in range(200):
        num, milli = [(0, 0), (1, 1000), (1, 810), (2, 1000)][i % 4]
        rows.append(f"p{i:04d},{2000 + 500 * (i % 5)},4096,{num},{milli},")
    (csv_dir / "openb_pod_list_smoke.csv").write_text("\n".join(rows) + "\n")
    args = ["bench", "fgd", "--trace", "smoke", "--policy", "bestfit,fgd+", "--seeds", "2"]
    args += ["--json", "--workers", "1", "--data", str(tmp_path)]
    plain = CliRunner().invoke(app, args)
    bounded = CliRunner().invoke(app, [*args, "--bound"])
    assert plain.exit_code == 0 and bounded.exit_code == 0, bounded.output
    # Every stdout line is JSON (HiGHS's banner must not land there).
    lines = [json.loads(line) for line in bounded.stdout.splitlines()]
    assert all("bound_pct" not in json.loads(line) for line in plain.stdout.splitlines())
    assert [r["policy"] for r in lines] == ["bestfit", "fgd+"]
    for record in lines:
        assert record["bound_exact"] is True
        assert 0 < record["bound_pct"] <= record["unallocated_pct"]
        assert record["above_bound"] == pytest.approx(
            record["unallocated_pct"] - record["bound_pct"], abs=1e-3
        )
