"""`gpufleet kube scheduler` stops when told to, also while the API server cannot be reached."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {{server: "http://127.0.0.1:{port}"}}
users:
- name: u
  user: {{token: t}}
contexts:
- name: gone
  context: {{cluster: gone, user: u}}
current-context: gone
"""


def _free_port() -> int:
    with socket.socket() as s:  # bound and closed: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_until(proc: subprocess.Popen[str], needle: str, lines: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return
    raise AssertionError(f"no {needle!r} in: {''.join(lines)}")


@pytest.mark.parametrize("leader_elect", [True, False])
def test_sigterm_stops_it_while_the_api_server_is_unreachable(tmp_path: Path, leader_elect: bool) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG.format(port=_free_port()))
    command = [sys.executable, "-m", "gpufleet.cli.main", "kube", "scheduler", "--kubeconfig", str(config)]
    if not leader_elect:
        command.append("--no-leader-elect")
    proc = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env={**os.environ}
    )
    lines: list[str] = []
    try:
        _read_until(proc, "retrying in", lines)  # it runs, and says so once per failed attempt
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    output = "".join(lines) + proc.stderr.read()
    assert "urllib3" not in output  # no hidden retries of the client's own
