"""What the real-Prometheus alert tests share: `gpufleet up` and a Prometheus as subprocesses, the rules
file with its `for:` durations at one second, and reads of Prometheus' HTTP API."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"
PROMETHEUS = shutil.which("prometheus")
GPUFLEET = Path(sys.executable).with_name("gpufleet")
# Safety net for each wait: every one of them ends within seconds when things work.
DEADLINE_S = 45.0
SKIP_REASON = "prometheus not installed (Debian package 'prometheus'; make test installs it where it can)"

Firing = dict[str, list[dict[str, str]]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fast(rules: dict[str, Any]) -> dict[str, Any]:
    """The rules with every `for:` at one second, nothing else changed."""
    copy = yaml.safe_load(yaml.safe_dump(rules))
    for group in copy["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    return copy


def write_fast_rules(path: Path) -> None:
    """Writes the fast copy of the shipped rules to `path`, having checked every expression is the same."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    copy = fast(rules)
    shipped = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert [r["expr"] for g in copy["groups"] for r in g["rules"]] == shipped
    path.write_text(yaml.safe_dump(copy), encoding="utf-8")


def wait(what: str, check: Callable[[], Any], log: Path, *, seen: Callable[[], Any] | None = None) -> Any:
    """`check()`'s first true answer; on timeout, fails with the end of `log` and what `seen()` says."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    now = f"\nnow: {seen()}" if seen is not None else ""
    raise AssertionError(f"timed out waiting for {what}{now}; log {log.name}:\n{log.read_text()[-3000:]}")


class Prometheus:
    def __init__(self, port: int) -> None:
        self.api = f"http://127.0.0.1:{port}/api/v1"

    def _get(self, path: str, **params: str) -> Any:
        try:
            response = httpx.get(f"{self.api}/{path}", params=params, timeout=5)
        except httpx.HTTPError:
            return None
        # While its storage starts, Prometheus answers 503 in plain text.
        return response.json()["data"] if response.status_code == 200 else None

    def value(self, query: str) -> float | None:
        data = self._get("query", query=query)
        results = data["result"] if data else []
        return float(results[0]["value"][1]) if len(results) == 1 else None

    def firing(self) -> Firing | None:
        """The labels of each firing alert, by alert name; None while Prometheus does not answer."""
        data = self._get("alerts")
        if data is None:
            return None
        out: Firing = {}
        for alert in data["alerts"]:
            if alert["state"] == "firing":
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out


def has(firing: Firing | None, alert: str, **labels: str) -> bool:
    return firing is not None and any(labels.items() <= got.items() for got in firing.get(alert, []))


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def reachable(server: str) -> bool:
    try:
        return httpx.get(server, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def start_up(run_dir: Path, fleet: str, *, time_scale: float, port: int) -> subprocess.Popen[bytes]:
    """`gpufleet up` on `fleet` (YAML) with its state in run_dir/state and its output in run_dir/up.log."""
    (run_dir / "fleet.yaml").write_text(fleet, encoding="utf-8")
    with (run_dir / "up.log").open("wb") as up_log:
        return subprocess.Popen(
            [str(GPUFLEET), "up", "-f", str(run_dir / "fleet.yaml"), "--state", str(run_dir / "state"),
             "--port", str(port), "--time-scale", str(time_scale)],
            stdout=up_log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def gpufleet(*args: str, server: str, state: Path) -> str:
    """Runs a `gpufleet` command against the server; its output, having checked it succeeded."""
    done = subprocess.run(
        [str(GPUFLEET), *args, "--server", server, "--state", str(state)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def start_prometheus(
    run_dir: Path, *, api_port: int, agent_port: int, web_port: int
) -> subprocess.Popen[bytes]:
    """A Prometheus scraping `gpufleet up` (with the admin token) and an agent every 2 s, evaluating the
    fast rules (run_dir/rules.yaml) every second; its log in run_dir/prometheus.log."""
    write_fast_rules(run_dir / "rules.yaml")
    config = {
        # A scrape may take over a second on a loaded machine; a timeout would read as the target
        # being down.
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
        "rule_files": [str(run_dir / "rules.yaml")],
        "scrape_configs": [
            {
                # The job names the rules' `up` matchers know.
                "job_name": "gpufleet-scheduler",
                "authorization": {"credentials_file": str(run_dir / "state" / "admin-token")},
                "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
            },
            {"job_name": "gpufleet-agent", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]},
        ],
    }
    (run_dir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert PROMETHEUS is not None
    with (run_dir / "prometheus.log").open("wb") as log:
        return subprocess.Popen(
            [PROMETHEUS, f"--config.file={run_dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={run_dir / 'data'}", f"--web.listen-address=127.0.0.1:{web_port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
