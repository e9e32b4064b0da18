"""The runs of `simulate --compare` side by side, each in a process of its own: the results come back
in order and equal to runs one after the other; a user error comes back as it was raised, a bug with
its traceback, a worker that dies by its exit code; and the other runs are stopped then."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_simulate_smoke import synthetic_trace
from typer.testing import CliRunner

from gpufleet.api.errors import DataError, ValidationError
from gpufleet.sim import workers
from gpufleet.sim.workers import Task, WorkerDied, WorkerFailed


def _square(n: int, progress: Callable[[str], None]) -> int:
    progress(f"squaring {n}")
    return n * n


def _bad_row(progress: Callable[[str], None]) -> int:
    raise DataError("must be a positive number of seconds, got '-5'", path="t.csv", line=3, field="duration")


def _bug(progress: Callable[[str], None]) -> int:
    return 1 // 0


def _dies(progress: Callable[[str], None]) -> int:
    os._exit(3)


def _sleeps(seconds: float, progress: Callable[[str], None]) -> int:
    progress("asleep")
    time.sleep(seconds)
    return 0


def squares(*numbers: int) -> list[Task[int]]:
    return [Task(f"n{n}", functools.partial(_square, n)) for n in numbers]


def run(tasks: list[Task[int]], processes: int) -> tuple[list[int], list[tuple[str, str]], list[str]]:
    lines: list[tuple[str, str]] = []
    started: list[str] = []
    results = workers.run_all(
        tasks,
        processes=processes,
        progress=lambda name, line: lines.append((name, line)),
        starting=started.append,
    )
    return results, lines, started


def test_results_come_back_in_the_tasks_order_with_their_progress_lines() -> None:
    results, lines, started = run(squares(3, 4, 5), processes=2)
    assert results == [9, 16, 25]
    assert sorted(lines) == [("n3", "squaring 3"), ("n4", "squaring 4"), ("n5", "squaring 5")]
    assert started == ["n3", "n4", "n5"]
    assert run(squares(3, 4, 5), processes=1) == (results, sorted(lines), started)
    assert not multiprocessing.active_children()


def test_a_user_error_comes_back_whole() -> None:
    with pytest.raises(DataError) as caught:
        run([*squares(2), Task("bad", _bad_row)], processes=2)
    assert str(caught.value) == "t.csv:3: field duration: must be a positive number of seconds, got '-5'"
    assert (caught.value.path, caught.value.line, caught.value.field) == ("t.csv", 3, "duration")


def test_every_user_error_pickles_with_its_fields() -> None:
    for error in (DataError("x", path="p", line=1, field="f"), ValidationError("y", obj="o", field="g")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and vars(again) == vars(error)


def test_a_bug_comes_back_with_its_traceback() -> None:
    with pytest.raises(WorkerFailed, match=r"(?s)run oops failed in its process:.*ZeroDivisionError"):
        run([Task("oops", _bug), *squares(2)], processes=2)


def test_a_worker_that_dies_is_named_and_the_others_are_stopped() -> None:
    began = time.monotonic()
    with pytest.raises(WorkerDied, match=r"run gone: its process ended without a result \(exit code 3\)"):
        run([Task("slow", functools.partial(_sleeps, 60.0)), Task("gone", _dies)], processes=2)
    assert time.monotonic() - began < 30
    assert not multiprocessing.active_children()


def test_no_fewer_than_one_process() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        workers.run_all(squares(1), processes=0, progress=lambda name, line: None)


def test_side_by_side_runs_report_what_runs_one_after_the_other_report(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    trace = synthetic_trace(tmp_path / "trace.csv", 30)
    configs = []
    for name, text in (("fifo", "policy: fifo\n"), ("las", "policy: las\n"), ("mine", "failures: mtbf=2h\n")):
        configs.append(tmp_path / f"{name}.yaml")
        configs[-1].write_text(text, encoding="utf-8")
    args = ["simulate", "--trace", str(trace), "--gpus", "32", "--start-day", "0", "--json", "--compare"]
    summaries = []
    for processes in ("3", "1"):
        result = CliRunner().invoke(app, [*args, *map(str, configs), "--processes", processes])
        assert result.exit_code == 0, result.output
        objects = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        summaries.append([{k: v for k, v in o.items() if k != "wall_seconds"} for o in objects])
    assert [o["run"] for o in summaries[0]] == ["fifo", "las", "mine"]
    assert summaries[0] == summaries[1]

    for bad, says in ((["--processes", "0"], "--processes: must be at least 1, got 0"),):
        refused = CliRunner().invoke(app, [*args, *map(str, configs), *bad])
        assert isinstance(refused.exception, ValidationError) and str(refused.exception) == says
    single = CliRunner().invoke(app, [*args[:-1], "--processes", "2"])
    assert isinstance(single.exception, ValidationError)
    assert "--processes: runs the configurations of --compare" in str(single.exception)
