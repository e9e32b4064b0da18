"""Runs of `gpufleet simulate --compare`, several at once, each in a process of its own.

The runs of a comparison share nothing but their inputs (the trace, the fleet, the seed): each builds
its own store, controllers and twin and returns what it measured. A simulation is one Python thread
busy all the time, so on a machine with several cores the runs go side by side, each in a process
started afresh (`spawn`: nothing of the parent's state or threads is inherited), and their results
come back whole through a pipe. The figures are the same as one after the other: every run is
deterministic, whichever process it is in.

A run that raises sends its error back and the comparison stops with it (a user error as it would
have read, anything else with its traceback); a worker that dies (killed, out of memory) is named with
its exit code. Ctrl-C stops the parent, which stops every worker: the workers ignore SIGINT, so that a
terminal's Ctrl-C, which reaches the whole process group, ends the runs once, from the parent.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Generic, TypeVar, cast

from gpufleet.api.errors import GpuFleetError

T = TypeVar("T")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Task(Generic[T]):
    """One run: `call(progress)` computes its result. `call` and what it holds must pickle (a
    module-level function, or a `functools.partial` of one over picklable arguments)."""

    name: str
    call: Callable[[Progress], T]


class WorkerDied(GpuFleetError):
    """A worker process ended without a result (killed, out of memory, or a crash in C)."""


class WorkerFailed(RuntimeError):
    """A run raised something other than a user error (a bug): the message carries its traceback."""


def usable_cpus() -> int:
    """The CPU cores this process may run on: its affinity mask (`taskset`, a cgroup's cpuset). A
    CPU quota (a container's `cpu.max`) is not seen; `--processes` is for that."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def run_all(
    tasks: Sequence[Task[T]],
    *,
    processes: int,
    progress: Callable[[str, str], None],
    starting: Callable[[str], None] = lambda name: None,
) -> list[T]:
    """The tasks' results, in the tasks' order. With `processes` 1 (or a single task) they run here,
    one after the other; else at most `processes` at once, each in a new process. `starting(name)`
    is called as a task starts, `progress(name, line)` with each of its progress lines."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    if processes == 1 or len(tasks) <= 1:
        results = []
        for task in tasks:
            starting(task.name)
            results.append(task.call(_lines_of(task.name, progress)))
        return results
    return _in_processes(tasks, processes, progress, starting)


def _lines_of(name: str, progress: Callable[[str, str], None]) -> Progress:
    return lambda line: progress(name, line)


def _in_processes(
    tasks: Sequence[Task[T]],
    processes: int,
    progress: Callable[[str, str], None],
    starting: Callable[[str], None],
) -> list[T]:
    context = multiprocessing.get_context("spawn")
    waiting = list(enumerate(tasks))
    running: dict[Connection, tuple[int, BaseProcess]] = {}
    results: dict[int, T] = {}
    try:
        while waiting or running:
            while waiting and len(running) < processes:
                index, task = waiting.pop(0)
                starting(task.name)
                receive, send = context.Pipe(duplex=False)
                started = context.Process(
                    target=_work, args=(task, send), name=f"gpufleet simulate: {task.name}", daemon=True
                )
                started.start()
                send.close()  # the worker holds the only sending end: its exit ends the pipe
                running[receive] = (index, started)
            for ready in wait(list(running)):
                assert isinstance(ready, Connection)
                index, worker = running[ready]
                done, result = _take(tasks[index].name, ready, worker, progress)
                if done:
                    del running[ready]
                    ready.close()
                    results[index] = cast(T, result)
    finally:
        for connection, (_, worker) in running.items():
            worker.terminate()
            worker.join()
            connection.close()
    return [results[index] for index in range(len(tasks))]


def _take(
    name: str, connection: Connection, worker: BaseProcess, progress: Callable[[str, str], None]
) -> tuple[bool, object]:
    """One message of a worker: a progress line (not done yet), or its result (done); its error, or
    its end without a result, raised. One message at a time, so that no worker waits for another's
    run to end to get its progress lines read."""
    try:
        kind, payload = connection.recv()
    except EOFError:
        worker.join()
        raise WorkerDied(
            f"its process ended without a result (exit code {worker.exitcode})", obj=f"run {name}"
        ) from None
    if kind == "progress":
        progress(name, payload)
        return False, None
    worker.join()
    if kind == "result":
        return True, payload
    if kind == "error":
        raise payload
    raise WorkerFailed(f"run {name} failed in its process:\n{payload}")


def _work(task: Task[object], send: Connection) -> None:
    """A worker's body: the task, its progress lines and its outcome, all through `send`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the runs (module docstring)
    outcome: tuple[str, object]
    try:
        outcome = ("result", task.call(lambda line: send.send(("progress", line))))
    except GpuFleetError as exc:
        outcome = ("error", exc)
    except BaseException:
        outcome = ("crash", traceback.format_exc())
    try:
        send.send(outcome)
    except Exception:  # it does not pickle (a send pickles it whole before writing a byte)
        send.send(("crash", traceback.format_exc()))
    finally:
        send.close()
