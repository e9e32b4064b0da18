from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli import main as cli_main

START_SECONDS = 30.0


@dataclass
class Plane:
    """A `gpufleet up` subprocess on a free loopback port."""

    state: Path
    process: subprocess.Popen[str]
    url: str
    log: Path

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.process.send_signal(sig)
        self.process.wait(timeout=30)


def start_plane(state: Path, *args: str) -> Plane:
    """Starts `gpufleet up --port 0` and waits until it wrote the URL it listens on."""
    url_file = state / "server.url"
    url_file.unlink(missing_ok=True)
    log = state.parent / f"{state.name}-up.log"
    command = [sys.executable, "-m", "gpufleet.cli.main", "up", "--state", str(state), "--port", "0", *args]
    env = {**os.environ, "COLUMNS": "200"}
    with log.open("a") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gpufleet up exited with {process.returncode}:\n{log.read_text()}")
        if url_file.exists() and url_file.read_text().strip():
            return Plane(state, process, url_file.read_text().strip(), log)
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"gpufleet up did not start in {START_SECONDS}s:\n{log.read_text()}")


def stop_plane(plane: Plane) -> None:
    if plane.process.poll() is None:
        plane.process.terminate()
        try:
            plane.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            plane.process.kill()


@pytest.fixture
def planes(tmp_path: Path) -> Iterator[Callable[..., Plane]]:
    """Starts control planes on tmp_path/state; every one still running at the end is stopped."""
    started: list[Plane] = []

    def start(*args: str) -> Plane:
        plane = start_plane(tmp_path / "state", *args)
        started.append(plane)
        return plane

    yield start
    for plane in started:
        stop_plane(plane)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The state directory the `cli` fixture's commands use (a module may point it elsewhere)."""
    return tmp_path / "state"


@pytest.fixture
def cli(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """Runs the gpufleet command in this process (as its entry point does), against `state`."""
    monkeypatch.setenv("GPUFLEET_STATE", str(state))
    monkeypatch.delenv("GPUFLEET_SERVER", raising=False)
    monkeypatch.delenv("GPUFLEET_TOKEN", raising=False)
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str, stdin: str | None = None) -> Result:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["gpufleet", *args])
        if stdin is not None:
            import io

            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = 0
        try:
            cli_main.main()
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
