"""Traces joined end to end for the FGD protocol (`--trace a+b`): a workload whose mix changes mid-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.api.errors import DataError
from gpufleet.cli.main import app
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import GPU_MILLI, PodRequest
from gpufleet.scheduler.placement.score_fgdplus import AdaptiveFgdPolicy
from gpufleet.sim.datasets import resolve_joined
from gpufleet.sim.fgd import joined_workload, run_once, workload
from gpufleet.sim.openb import TracePod

NODES = [NodeSpec(f"n{i}", "T4", 4, 32_000, 65_536) for i in range(6)]
CLUSTER_MILLI = sum(n.gpus for n in NODES) * GPU_MILLI
WHOLE = [TracePod(f"p{i:03d}", PodRequest(4_000, 1_024, gpus=1 + i % 2)) for i in range(10)]
SHARES = [TracePod(f"p{i:03d}", PodRequest(2_000, 1_024, gpu_milli=300 + 100 * (i % 3))) for i in range(10)]


def test_the_second_trace_arrives_after_the_first_each_at_half_the_load() -> None:
    stream = joined_workload([WHOLE, SHARES], CLUSTER_MILLI, seed=3)
    parts = [name.split("/")[0] for name in (p.name for p in stream)]
    boundary = parts.index("1")
    assert set(parts[:boundary]) == {"0"} and set(parts[boundary:]) == {"1"}
    assert all(0 < p.request.gpu_milli < GPU_MILLI for p in stream[boundary:])
    assert all(p.request.gpu_milli == 0 for p in stream[:boundary])
    assert len({p.name for p in stream}) == len(stream)  # the traces' own names overlap
    for part in (stream[:boundary], stream[boundary:]):
        total = sum(p.request.total_gpu_milli for p in part)
        assert 0.55 * CLUSTER_MILLI < total <= 0.65 * CLUSTER_MILLI
    # The first part is the single-trace stream of the same seed at that load.
    alone = workload(WHOLE, CLUSTER_MILLI, 3, 0.65)
    assert [p.request for p in stream[:boundary]] == [p.request for p in alone]
    assert joined_workload([WHOLE, SHARES], CLUSTER_MILLI, seed=3) == stream


def test_learn_first_only_stops_learning_where_the_second_trace_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    learnt: list[PodRequest] = []
    original = AdaptiveFgdPolicy.learn

    def counting(self: AdaptiveFgdPolicy, request: PodRequest) -> None:
        learnt.append(request)
        original(self, request)

    monkeypatch.setattr(AdaptiveFgdPolicy, "learn", counting)
    run_once(NODES, WHOLE, "fgd+", 1, then=[SHARES], learn_first_only=True)
    assert learnt and all(r.gpu_milli == 0 for r in learnt)
    learnt.clear()
    full = run_once(NODES, WHOLE, "fgd+", 1, then=[SHARES])
    assert len(learnt) == full.placed and any(r.gpu_milli > 0 for r in learnt)


def _data(tmp_path: Path, traces: dict[str, list[str]], gpus: int = 4) -> Path:
    folder = tmp_path / "alibaba-gpu-v2023" / "csv"
    folder.mkdir(parents=True)
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"] + [f"n{i},64000,262144,{gpus},T4" for i in range(30)]
    (folder / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    for name, rows in traces.items():
        header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"
        (folder / f"openb_pod_list_{name}.csv").write_text("\n".join([header, *rows]) + "\n")
    return tmp_path


def _rows(shapes: list[tuple[int, int]], count: int = 200) -> list[str]:
    return [
        f"p{i:04d},{2000 + 500 * (i % 5)},4096,{shapes[i % len(shapes)][0]},{shapes[i % len(shapes)][1]},"
        for i in range(count)
    ]


def test_bench_fgd_runs_a_joined_trace_and_its_learn_first_only_measurement(tmp_path: Path) -> None:
    data = _data(tmp_path, {"whole": _rows([(1, 1000), (2, 1000), (0, 0)]), "share": _rows([(1, 450)])})
    base = ["bench", "fgd", "--trace", "whole+share", "--policy", "fgd+", "--seeds", "1", "--json"]
    base += ["--workers", "1", "--data", str(data)]
    records = []
    for extra in (["--bound"], ["--learn-first-only"]):
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code == 0, result.output
        records += [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["trace"] for r in records] == ["whole+share", "whole+share"]
    assert "learn_first_only" not in records[0] and records[1]["learn_first_only"] is True
    assert records[0]["above_bound"] >= 0 and records[0]["bound_pct"] > 0  # shares strand milli
    assert all(0 <= r["unallocated_pct"] <= 100 for r in records)


def test_learn_first_only_needs_a_joined_trace(tmp_path: Path) -> None:
    data = _data(tmp_path, {"whole": _rows([(1, 1000)])})
    args = ["bench", "fgd", "--trace", "whole", "--seeds", "1", "--learn-first-only", "--data", str(data)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "joined trace" in result.output


def test_traces_on_different_node_lists_are_not_joined(tmp_path: Path) -> None:
    one = _data(tmp_path / "one", {"whole": _rows([(1, 1000)])})
    two = _data(tmp_path / "two", {"share": _rows([(1, 450)])}, gpus=8)
    first = one / "alibaba-gpu-v2023" / "csv" / "openb_pod_list_whole.csv"
    second = two / "alibaba-gpu-v2023" / "csv" / "openb_pod_list_share.csv"
    with pytest.raises(DataError, match="different node lists") as caught:
        resolve_joined(f"{first}+{second}")
    assert "whole" in str(caught.value) and "share" in str(caught.value)
    # The same node list in two places (same content) joins.
    same = _data(tmp_path / "same", {"share": _rows([(1, 450)])})
    joined = resolve_joined(f"{first}+{same / 'alibaba-gpu-v2023' / 'csv' / 'openb_pod_list_share.csv'}")
    assert joined.name == "whole+share" and len(joined.then) == 1


def test_an_empty_part_of_a_joined_trace_is_an_error(tmp_path: Path) -> None:
    data = _data(tmp_path, {"whole": _rows([(1, 1000)])})
    with pytest.raises(DataError, match="empty part"):
        resolve_joined("whole+", data)


def test_no_policy_run_on_a_joined_trace_is_below_its_bound() -> None:
    from gpufleet.sim.fgd_bound import bound_once

    shares = [TracePod(f"s{i:03d}", PodRequest(2_000, 1_024, gpu_milli=810)) for i in range(10)]
    for seed in range(2):
        bound = bound_once(NODES, WHOLE, seed, then=[shares])
        # The second trace's 810-milli shares strand 190 milli per GPU they take: the bound sees them.
        assert bound.exact and bound.unallocated_pct > bound_once(NODES, WHOLE, seed).unallocated_pct
        for policy in ("fgd+", "bestfit"):
            run = run_once(NODES, WHOLE, policy, seed, then=[shares])
            assert run.unallocated_pct >= bound.unallocated_pct - 1e-9
