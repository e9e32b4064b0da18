"""`gpufleet up`'s banner prints commands that work in a new terminal, whose PATH need not hold
`gpufleet` (after `make run` it is in `.venv/bin`, which nothing put on the PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gpufleet.cli.up import _banner, how_to_run

BIN = str(Path(sys.executable).parent)


def _path_without_bin() -> str:
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != BIN)


def _shell(setup: list[str], command: str, path: str) -> subprocess.CompletedProcess[str]:
    script = " && ".join([*setup, f"{command} gpu-models"])
    return subprocess.run(
        ["sh", "-c", script],
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_where_gpufleet_is_not_on_the_path_the_printed_commands_still_run_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _path_without_bin()
    monkeypatch.setenv("PATH", path)
    setup, command = how_to_run()
    assert setup or command != "gpufleet", "a bare `gpufleet` would not be found on this PATH"
    done = _shell(setup, command, path)
    assert done.returncode == 0, done.stderr
    assert "H100-80GB" in done.stdout


def test_where_gpufleet_is_on_the_path_the_banner_says_just_gpufleet(monkeypatch: pytest.MonkeyPatch) -> None:
    if not (Path(BIN) / "gpufleet").is_file():
        pytest.skip("gpufleet is not installed as a script beside this interpreter")
    monkeypatch.setenv("PATH", os.pathsep.join([BIN, _path_without_bin()]))
    assert how_to_run() == ([], "gpufleet")


def test_the_banner_prints_the_setup_line_before_the_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_without_bin())
    setup, command = how_to_run()
    out = Console(record=True, width=200)
    _banner(out, "http://127.0.0.1:9000", Path("/s"), Path("/s/admin-token"), True, 1.0, True)
    text = out.export_text()
    lines = text.splitlines()
    first = lines.index("Try, in another terminal:") + 1
    for index, line in enumerate(setup):
        assert lines[first + index].strip().startswith(line)
    assert f"{command} get pools" in text
    assert "export GPUFLEET_SERVER=http://127.0.0.1:9000 GPUFLEET_STATE=/s" in text
