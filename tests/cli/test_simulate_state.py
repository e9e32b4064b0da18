"""`gpufleet simulate --state-dir`: the simulated world is kept where `gpufleet get --state` reads it,
`--keep-events` keeps Events there only, and a directory holding a state already is refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .conftest import Result, start_plane, stop_plane

Cli = Callable[..., Result]


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,600,8,4800,aa\n"
        "2017-10-01 00:01:00,300,4,1200,aa\n"
        "2017-10-01 00:02:00,900,16,14400,bb\n",
        encoding="utf-8",
    )
    return trace


def _simulate(cli: Cli, tmp_path: Path, *extra: str) -> Result:
    args = ["simulate", "--trace", str(_trace(tmp_path)), "--gpus", "16", "--start-day", "0", "--json"]
    return cli(*args, *extra)


def test_the_kept_world_and_its_events_are_read_by_get_and_events(cli: Cli, tmp_path: Path) -> None:
    kept = tmp_path / "sim"
    result = _simulate(cli, tmp_path, "--state-dir", str(kept), "--keep-events")
    assert result.code == 0, result.err
    assert result.json()["finished"] == 3 and result.json()["events"] == {}  # none dropped: all kept
    assert "state kept in" in result.err and "--no-runtime" in result.err  # how to look at it
    plane = start_plane(kept, "--no-runtime")
    try:
        state = ["--state", str(kept)]
        queues = cli("get", "queues", "-o", "name", *state)
        assert queues.code == 0, queues.err
        assert {"queue.gpufleet.io/vc-aa", "queue.gpufleet.io/vc-bb"} <= set(queues.out.split())
        described = cli("describe", "queue", "vc-aa", *state)
        assert described.code == 0 and "vc-aa" in described.out, described.err
        # The simulator collects a job once it finished (its record is in the summary): none is left.
        jobs = cli("get", "trainingjobs", "-A", "-o", "json", *state)
        assert jobs.code == 0, jobs.err
        assert jobs.json()["items"] == []
        events = cli("events", "-o", "json", "--limit", "1000", *state)
        assert events.code == 0, events.err
        job_done = ("TrainingJob", "Succeeded")
        specs = [e["spec"] for e in events.json()["items"]]
        succeeded = {s["involvedName"] for s in specs if (s["involvedKind"], s["reason"]) == job_done}
        assert succeeded == {"j2", "j3", "j4"}  # every trace job's end (named by its line), as recorded
    finally:
        stop_plane(plane)


def test_dropped_events_are_counted_by_reason_in_the_json_summary(cli: Cli, tmp_path: Path) -> None:
    result = _simulate(cli, tmp_path, "--state-dir", str(tmp_path / "sim"))
    assert result.code == 0, result.err
    assert result.json()["events"].get("Succeeded") == 3
    assert (tmp_path / "sim" / "gpufleet.db").exists()


def test_keep_events_without_a_state_dir_is_refused(cli: Cli, tmp_path: Path) -> None:
    result = _simulate(cli, tmp_path, "--keep-events")
    assert result.code != 0
    assert "--keep-events" in result.err and "--state-dir" in result.err


def test_a_directory_holding_a_state_is_refused_before_the_run(cli: Cli, tmp_path: Path) -> None:
    first = _simulate(cli, tmp_path, "--state-dir", str(tmp_path / "sim"))
    assert first.code == 0, first.err
    again = _simulate(cli, tmp_path, "--state-dir", str(tmp_path / "sim"))
    assert again.code != 0 and again.out == ""
    assert "--state-dir" in again.err and "already holds a gpufleet state" in again.err


def test_compare_keeps_each_run_in_its_own_directory(cli: Cli, tmp_path: Path) -> None:
    configs = []
    for name in ("gpufleet", "fifo"):
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"policy: {name}\n", encoding="utf-8")
        configs.append(str(config))
    kept = tmp_path / "sim"
    (kept / "fifo").mkdir(parents=True)
    (kept / "fifo" / "gpufleet.db").write_bytes(b"")  # a state where the second run would go
    refused = _simulate(cli, tmp_path, "--state-dir", str(kept), "--compare", *configs)
    assert refused.code != 0 and "already holds a gpufleet state" in refused.err
    assert not (kept / "gpufleet").exists()  # refused before the first run
    (kept / "fifo" / "gpufleet.db").unlink()
    result = _simulate(cli, tmp_path, "--state-dir", str(kept), "--compare", *configs)
    assert result.code == 0, result.err
    assert (kept / "gpufleet" / "gpufleet.db").exists() and (kept / "fifo" / "gpufleet.db").exists()
    runs = [line for line in result.out.splitlines() if line.strip()]
    assert [r.count('"events"') for r in runs] == [1, 1]
