"""`gpufleet simulate` with MIG jobs on MIG pools, and a restart time paid by every pod start.

MIG: a trace row with a `mig` profile is one pod holding one instance; instances of one GPU run side by
side, each counted in utilisation as its part of the GPU's compute; a job whose profile the fleet
lacks is left out rather than waiting for ever. Restart time: the GPUs are held while a pod starts,
and no work is done, so goodput falls below utilisation by exactly that time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.errors import DataError, ValidationError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.pool import GPUPool, GPUPoolSpec, Sharing
from gpufleet.sim import jobfleet, jobreport, jobsim, philly
from gpufleet.sim.compare import load_config

HOUR = 3600.0


def write_trace(path: Path, rows: list[str], *, mig: bool = False) -> Path:
    header = "timestamp,duration,num_gpus,cluster" + (",mig" if mig else "")
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def mig_pool(nodes: int = 1, layout: list[str] | None = None) -> GPUPool:
    return GPUPool(
        metadata=ObjectMeta(name="mig"),
        spec=GPUPoolSpec(
            gpu_model="H100-80GB",
            gpus_per_node=8,
            nodes=nodes,
            sharing=Sharing(mig={"*": layout or ["1g.10gb"] * 7}),
        ),
    )


def run(trace_path: Path, pools: list[GPUPool], options: jobsim.SimOptions) -> jobsim.SimResult:
    trace = philly.load(trace_path)
    queues = jobfleet.queues_for(options.policy, pools, trace)
    return jobsim.simulate(trace, pools, queues, options=options)


def test_mig_jobs_share_gpus_and_count_their_slices(tmp_path: Path) -> None:
    # 14 one-slice jobs of an hour at once on one node of 7 x 1g.10gb per GPU: all start at once
    # (two GPUs' worth of instances); a 2g.20gb job and a whole-GPU job can never run there.
    rows = ["2026-01-05 00:00:00,3600,1,serve,1g.10gb" for _ in range(14)]
    rows += ["2026-01-05 00:00:00,3600,1,serve,2g.20gb", "2026-01-05 00:00:00,3600,1,serve,"]
    result = run(write_trace(tmp_path / "mig.csv", rows, mig=True), [mig_pool()], jobsim.SimOptions())
    assert sorted(j.mig or "whole" for j in result.unplaceable) == ["2g.20gb", "whole"]
    records = list(result.jobs.values())
    assert len(records) == 14 and all(r.end is not None for r in records)
    assert {r.start for r in records} == {result.begin}
    assert not result.double_booked
    # 14 instances of 1/7 of a GPU for the hour: 2 of the node's 8 GPUs' compute.
    util, good = jobreport.utilisation_series(result)
    assert util[0] == pytest.approx(2 / 8)
    assert good[0] == pytest.approx(2 / 8)
    assert jobfleet.fleet_gpus([mig_pool()]) == {"H100-80GB": 8, "1g.10gb": 56}


def test_the_same_jobs_on_whole_gpus_hold_a_gpu_each(tmp_path: Path) -> None:
    rows = ["2026-01-05 00:00:00,3600,1,serve" for _ in range(14)]
    result = run(write_trace(tmp_path / "whole.csv", rows), jobfleet.fleet_of_gpus(8), jobsim.SimOptions())
    starts = sorted(r.start for r in result.jobs.values() if r.start is not None)
    assert starts[7] == starts[0] and starts[8] == pytest.approx(starts[0] + HOUR)  # 8 at a time


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("2026-01-05 00:00:00,60,1,serve,9g.99gb", "not a MIG profile"),
        ("2026-01-05 00:00:00,60,2,serve,1g.10gb", "num_gpus must be 1"),
    ],
)
def test_a_bad_mig_column_names_line_and_field(tmp_path: Path, row: str, says: str) -> None:
    with pytest.raises(DataError) as info:
        philly.load(write_trace(tmp_path / "bad.csv", [row], mig=True))
    text = str(info.value)
    assert says in text and ":2" in text and "mig" in text


def test_restart_time_holds_the_gpus_without_work(tmp_path: Path) -> None:
    rows = [f"2026-01-05 00:{m:02d}:00,1800,8,a" for m in range(0, 40, 5)]
    trace = write_trace(tmp_path / "t.csv", rows)
    plain = run(trace, jobfleet.fleet_of_gpus(64), jobsim.SimOptions())
    slow = run(trace, jobfleet.fleet_of_gpus(64), jobsim.SimOptions(restart_seconds=600.0))
    for name, record in slow.jobs.items():
        before = plain.jobs[name]
        assert record.end is not None and before.end is not None
        assert record.end - record.submit == pytest.approx(before.end - before.submit + 600.0)
    s_plain, s_slow = jobreport.summarise(plain), jobreport.summarise(slow)
    # Each job holds 8 GPUs 10 minutes longer, of which nothing is useful.
    assert s_slow.utilisation > s_plain.utilisation
    assert s_slow.goodput == pytest.approx(s_plain.goodput)
    assert s_slow.goodput < s_slow.utilisation


def test_restart_time_in_a_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("restartTime: 5m\ncheckpointInterval: 30m\n", encoding="utf-8")
    assert load_config(path).options.restart_seconds == 300.0
    path.write_text("restartTime: soon\n", encoding="utf-8")
    with pytest.raises(Exception, match="restartTime"):
        load_config(path)


def test_cli_refuses_a_bad_restart_time(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    trace = write_trace(tmp_path / "t.csv", ["2026-01-05 00:00:00,60,1,a"])
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(trace), "--gpus", "8", "--restart-time", "soon"]
    )
    assert isinstance(result.exception, ValidationError)
    assert "--restart-time" in str(result.exception) and "'soon'" in str(result.exception)
