"""`gpufleet simulate`'s option parsing: durations, --failures, --spot, and bad input as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.api.errors import DataError, ValidationError
from gpufleet.cli.simulate import parse_duration, parse_failures, parse_spot
from gpufleet.sim.options import parse_checkpoint_interval


def test_durations_failures_and_spot() -> None:
    assert parse_duration("90", "x") == 90.0
    assert parse_duration("30m", "x") == 1800.0
    assert parse_duration("2h", "x") == 7200.0
    assert parse_duration("1.5d", "x") == 129600.0
    assert parse_failures("mtbf=2h") == (7200.0, None)
    assert parse_failures("mtbf=2h,node-mtbf=3d") == (7200.0, 259200.0)
    assert parse_failures("node-mtbf=1d") == (None, 86400.0)
    assert parse_spot("interruptions-per-day=2.5") == 2.5
    assert parse_spot("interruptions-per-day=720") == 720.0


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: parse_duration("soon", "--checkpoint-interval"), "--checkpoint-interval"),
        (lambda: parse_duration("0s", "--checkpoint-interval"), "positive duration"),
        (lambda: parse_checkpoint_interval("0.5s"), "--checkpoint-interval: must be at least 1s"),
        (lambda: parse_failures("mtbf"), "mtbf=DURATION"),
        (lambda: parse_failures("mtbf=2h,mtbf=3h"), "mtbf=DURATION"),
        (lambda: parse_failures("mttr=2h"), "mtbf=DURATION"),
        (lambda: parse_spot("interruptions-per-day=-1"), "N >= 0"),
        (lambda: parse_spot("rate=1"), "interruptions-per-day=N"),
        (lambda: parse_spot("interruptions-per-day=721"), "at most 720 interruptions a day"),
    ],
)
def test_bad_values_are_validation_errors(call: object, says: str) -> None:
    assert callable(call)
    with pytest.raises(ValidationError, match=says):
        call()


def test_unknown_policy_is_refused_before_anything_runs() -> None:
    from gpufleet.cli.main import app

    result = CliRunner().invoke(app, ["simulate", "--policy", "lottery", "--gpus", "64"])
    assert isinstance(result.exception, ValidationError)
    assert "unknown policy 'lottery'" in str(result.exception)


def test_a_queues_file_must_have_a_queue_for_every_cluster(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,60,1,60,aa\n2017-10-01 00:01:00,60,1,60,bb\n",
        encoding="utf-8",
    )
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: vc-aa}\n"
        "spec: {quotas: {H100-80GB: {nominal: 8}}}\n",
        encoding="utf-8",
    )
    args = ["simulate", "--trace", str(trace), "--gpus", "8", "--start-day", "0", "--queues", str(queues)]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ValidationError)
    assert "no queue for the trace's clusters: vc-bb" in str(result.exception)


def test_a_window_without_jobs_is_refused_by_name(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,60,1,60,aa\n"
        "2017-10-03 00:00:00,60,1,60,aa\n",
        encoding="utf-8",
    )
    args = ["simulate", "--trace", str(trace), "--gpus", "8", "--start-day", "1", "--days", "0.5"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ValidationError)
    said = str(result.exception)
    assert said.startswith("--days: no job of the trace is submitted in the window")
    # where the submissions are, in the days --start-day counts: the next one after the window
    assert "(days 1.000 to 1.500; the next one is submitted at day 2.000)" in said
    # a start after the last submission is the start's fault, whatever --days says
    result = CliRunner().invoke(app, [*args[:-4], "--start-day", "2.5"])
    assert isinstance(result.exception, ValidationError)
    said = str(result.exception)
    assert said.startswith("--start-day: no job of the trace is submitted in the window")
    assert "(from day 2.500; its last one is submitted at day 2.000)" in said


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpus", "0"], "--gpus: must be a positive multiple of 8"),
        (["--gpus", "99999999992"], "at most 524,288"),
        (["--seed", "-1"], "--seed: must be zero or more"),
        (["--gang-slowdown", "rak=1.3"], "'rak' is not a topology level of a simulated fleet"),
    ],
)
def test_impossible_numbers_are_refused_by_option(args: list[str], says: str) -> None:
    from gpufleet.cli.main import app

    result = CliRunner().invoke(app, ["simulate", "--days", "0.1", *args])
    assert isinstance(result.exception, (ValidationError, DataError))
    assert says in str(result.exception)


def test_unwritable_report_and_state_folders_are_refused_before_the_run(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    trace = tmp_path / "missing.csv"  # never read: the report folder is checked first
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--report", str(blocker / "out")])
    assert isinstance(result.exception, ValidationError)
    assert f"--report: cannot write in {blocker / 'out'}" in str(result.exception)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--state-dir", str(blocker / "w")])
    assert isinstance(result.exception, ValidationError)
    assert f"--state-dir: cannot write in {blocker / 'w'}" in str(result.exception)


def _trace(tmp_path: Path, *rows: str) -> str:
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(rows), encoding="utf-8")
    return str(trace)


def test_a_window_no_job_of_which_fits_the_fleet_is_refused(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    trace = _trace(tmp_path, "2017-10-01 00:00:00,60,64,60,aa\n", "2017-10-01 00:01:00,60,16,60,aa\n")
    for args in (["simulate"], ["simulate", "--compare", str(tmp_path / "run.yaml")]):
        (tmp_path / "run.yaml").write_text("policy: fifo\n", encoding="utf-8")
        result = CliRunner().invoke(app, [*args, "--trace", trace, "--gpus", "8", "--start-day", "0"])
        assert isinstance(result.exception, ValidationError)
        message = str(result.exception)
        assert "--gpus" in message and "none of the 2 jobs submitted in the window fits" in message
        assert "line 2 asks for 64 GPUs" in message


def test_a_run_without_a_finished_job_prints_dashes_and_json_nulls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from gpufleet.cli.main import app
    from gpufleet.sim import jobsim

    monkeypatch.setattr(jobsim, "DRAIN_LIMIT", 86400.0)  # ten years of an idle fleet, shortened
    # The second job can never run on 8 GPUs; the first outlasts the drain limit.
    trace = _trace(tmp_path, "2017-10-01 00:00:00,1e9,1,1e9,aa\n", "2017-10-01 00:00:00,60,64,60,aa\n")
    args = ["simulate", "--trace", trace, "--gpus", "8", "--start-day", "0"]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "1 job (0 finished, 1 the fleet cannot run left out)" in text.output
    assert "JCT mean -, p50 -, p99 -" in text.output
    assert "nan" not in text.output
    as_json = CliRunner().invoke(app, [*args, "--json"])
    figures = json.loads(as_json.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert figures["jct_mean"] is None and figures["unplaceable"] == 1 and figures["finished"] == 0
