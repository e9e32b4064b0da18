"""Claims (b) and (c) at a larger fleet draw their traces themselves (benchmarks/claims/gang_scaled.py,
mig_factor.py --nodes): a scaled trace must be the committed experiment made larger, not another one,
and the default size must still replay the committed traces the recorded results came from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from gpufleet.sim import philly

CLAIMS = Path(__file__).resolve().parents[2] / "benchmarks" / "claims"


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, CLAIMS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quarter_mix_at_2048_gpus_is_the_256_gpu_trace_with_every_job_8x_larger(tmp_path: Path) -> None:
    gang_scaled = script("gang_scaled")
    paths = gang_scaled.write_traces(tmp_path, fleet_gpus=2048, mix="quarter", days=2.0)
    small = philly.load(CLAIMS / "traces" / "gang.csv").jobs
    large = philly.load(paths["gang"]).jobs
    assert [(j.submit, j.duration, j.cluster) for j in large] == [
        (j.submit, j.duration, j.cluster) for j in small
    ]
    assert [j.gpus for j in large] == [8 * j.gpus for j in small]
    assert max(j.gpus for j in large) == 512  # a quarter of the fleet, as 64 of 256


def test_the_same_mix_at_2048_gpus_offers_the_same_load_and_its_split_keeps_the_work(tmp_path: Path) -> None:
    gang_scaled = script("gang_scaled")
    paths = gang_scaled.write_traces(tmp_path, fleet_gpus=2048, mix="same", days=0.5)
    gang = philly.load(paths["gang"]).jobs
    split = philly.load(paths["split"]).jobs
    small = [j for j in philly.load(CLAIMS / "traces" / "gang.csv").jobs if j.submit < 0.5 * 86400]
    assert 6 * len(small) < len(gang) < 10 * len(small)  # 8x the jobs, to Poisson noise
    assert {j.gpus for j in gang} == {1, 2, 4, 8, 16, 32, 64}
    assert sum(j.gpus * j.duration for j in gang) == sum(j.gpus * j.duration for j in split)
    assert max(j.gpus for j in split) == 8


def test_gang_trace_refuses_sizes_that_do_not_match_the_weights() -> None:
    make_traces = script("make_traces")
    with pytest.raises(ValueError, match="sizes needs 7 GPU counts"):
        make_traces.gang_trace(sizes=(1, 2, 4))


def test_mig_factor_at_two_nodes_replays_the_committed_traces(tmp_path: Path) -> None:
    mig_factor = script("mig_factor")
    for name in mig_factor.CASES:
        assert mig_factor.trace_path(name, 2, tmp_path) == CLAIMS / "traces" / name
        # and its stream parameters draw those very bytes, so --nodes N scales the recorded stream
        rate, mix = mig_factor.STREAMS[name]
        drawn = tmp_path / name
        mig_factor.make_traces.write(
            drawn, mig_factor.make_traces.mig_trace(jobs_per_hour=rate, mix=mix), mig=True
        )
        assert drawn.read_bytes() == (CLAIMS / "traces" / name).read_bytes(), name


def test_mig_factor_scales_the_stream_with_the_fleet(tmp_path: Path) -> None:
    mig_factor = script("mig_factor")
    base = philly.load(CLAIMS / "traces" / "mig-mix.csv").jobs
    scaled = philly.load(mig_factor.trace_path("mig-mix.csv", 8, tmp_path)).jobs
    assert 3.5 * len(base) < len(scaled) < 4.5 * len(base)  # 4x the jobs an hour, to Poisson noise
    profiles = {j.mig for j in scaled}
    assert profiles == {"1g.10gb", "2g.20gb", "3g.40gb"}
    assert mig_factor.mig_fleet(mig_factor.CASES["mig-mix.csv"], 8)[0].spec.nodes == 8


def test_mig_factor_cuts_the_same_stream_for_a_shorter_window(tmp_path: Path) -> None:
    mig_factor = script("mig_factor")
    committed = philly.load(CLAIMS / "traces" / "mig-1g.csv").jobs
    short = philly.load(mig_factor.trace_path("mig-1g.csv", 2, tmp_path, hours=1.0)).jobs
    first_hour = [j for j in committed if j.submit < 3600]
    assert [(j.submit, j.duration, j.mig) for j in short] == [
        (j.submit, j.duration, j.mig) for j in first_hour
    ]
