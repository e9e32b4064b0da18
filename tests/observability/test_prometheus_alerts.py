"""The alert rules against the real thing: a real Prometheus (the Debian `prometheus` package, installed
by scripts/ensure-prometheus.sh) scrapes `gpufleet up` (a small twin fleet at 600x time) and a node
agent's exporter (the recorded HGX H100 profile with its health monitor), evaluates the project's rules
file, and faults injected the way an operator would (`gpufleet fault`, NVML XID events) make the
expected alerts fire, seen through Prometheus' HTTP API (/api/v1/alerts). The Grafana dashboards'
queries run on the same series.

The rules are a copy whose `for:` durations are one second (30 minutes would outlast any test); every
expression is the shipped one, which the test checks.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpufleet.agent.config import parse_config
from gpufleet.agent.exporter import DcgmCollector, MetricsServer
from gpufleet.agent.health import HealthMonitor, HealthState
from gpufleet.agent.nvml import RecordedNvml
from gpufleet.observability import dashboards

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"
PROMETHEUS = shutil.which("prometheus")
GPUFLEET = Path(sys.executable).with_name("gpufleet")
# Safety net for each wait: every one of them ends within seconds when things work.
DEADLINE_S = 45.0

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: alerts}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: 3.0}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  quotas: {H100-80GB: {nominal: 16}}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team-a}
spec:
  queue: team-a
  replicas: 2
  worker: {gpus: 8}
  restartPolicy: {maxRestarts: 5, backoffSeconds: 0}
  durationSeconds: 86400000
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fast(rules: dict[str, Any]) -> dict[str, Any]:
    """The rules with every `for:` at one second, nothing else changed."""
    copy = yaml.safe_load(yaml.safe_dump(rules))
    for group in copy["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    return copy


def _wait(what: str, check: Callable[[], Any], log: Path) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; Prometheus' log:\n{log.read_text()[-3000:]}")


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

    def firing(self) -> dict[str, list[dict[str, str]]] | None:
        """The labels of each firing alert, by alert name; None while Prometheus does not answer."""
        data = self._get("alerts")
        if data is None:
            return None
        out: dict[str, list[dict[str, str]]] = {}
        for alert in data["alerts"]:
            if alert["state"] == "firing":
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # A short path: the twin's state directory holds unix sockets of its own.
    path = Path(subprocess.check_output(["mktemp", "-d", "/tmp/gf-alerts-XXXX"], text=True).strip())
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _has(firing: dict[str, list[dict[str, str]]] | None, alert: str, **labels: str) -> bool:
    return firing is not None and any(labels.items() <= got.items() for got in firing.get(alert, []))


@pytest.mark.slow
def test_faults_in_a_twin_and_on_a_node_fire_the_expected_alerts(run_dir: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip(
            "prometheus not installed (Debian package 'prometheus'; make test installs it where it can)"
        )
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    fast = _fast(rules)
    shipped = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert [r["expr"] for g in fast["groups"] for r in g["rules"]] == shipped
    (run_dir / "rules.yaml").write_text(yaml.safe_dump(fast), encoding="utf-8")
    (run_dir / "fleet.yaml").write_text(FLEET, encoding="utf-8")
    state = run_dir / "state"
    api_port, web_port = _free_port(), _free_port()
    server = f"http://127.0.0.1:{api_port}"
    log = run_dir / "prometheus.log"

    # The node agent's exporter and health monitor over a recorded HGX H100 (hostname alerts-0).
    nvml = RecordedNvml.from_profile("hgx-h100")
    node = nvml.discover()
    health = HealthState()
    monitor = HealthMonitor(nvml, node, parse_config({}).health, health)
    exporter = MetricsServer(
        [DcgmCollector(nvml, node, hostname="alerts-0", health=health)], port=0, address="127.0.0.1"
    )
    up_log = (run_dir / "up.log").open("wb")
    up = subprocess.Popen(
        [str(GPUFLEET), "up", "-f", str(run_dir / "fleet.yaml"), "--state", str(state),
         "--port", str(api_port), "--time-scale", "600"],
        stdout=up_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    prom_log = log.open("wb")
    prom: subprocess.Popen[bytes] | None = None
    monitor.start()
    exporter.start()
    try:
        _wait(
            "gpufleet up", lambda: (state / "admin-token").exists() and _reachable(server), run_dir / "up.log"
        )
        (run_dir / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    # A scrape may take over a second on a loaded machine; a timeout would read as
                    # the target being down.
                    "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
                    "rule_files": [str(run_dir / "rules.yaml")],
                    "scrape_configs": [
                        {
                            # The job names the rules' `up` matchers know.
                            "job_name": "gpufleet-scheduler",
                            "authorization": {"credentials_file": str(state / "admin-token")},
                            "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
                        },
                        {
                            "job_name": "gpufleet-agent",
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
                        },
                    ],
                }
            ),
            encoding="utf-8",
        )
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={run_dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={run_dir / 'data'}", f"--web.listen-address=127.0.0.1:{web_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        p = Prometheus(web_port)

        # Healthy: the job runs on all 16 GPUs, both targets are up, and no alert fires.
        _wait("the job's 16 GPUs", lambda: p.value('sum(gpufleet_gpus{state="allocated"})') == 16, log)
        _wait("both targets up", lambda: p.value("sum(up)") == 2, log)
        # (The job waited a moment at the start: what that raised clears at the next evaluations.)
        _wait("no alert firing", lambda: p.firing() == {}, log)

        # Faults: an XID and a GPU off the bus seen by the agent's health monitor, a GPU running hot,
        # and a failed GPU in the twin, whose 8-GPU workers then no longer fit on its node.
        nvml.inject_xid(node.gpus[2].uuid, 94)
        nvml.lose_gpu(node.gpus[1].uuid)
        nvml.set_telemetry(node.gpus[4].uuid, gpu_temp_c=91.0)
        fault = subprocess.run(
            [str(GPUFLEET), "fault", "gpu-failure", "alerts-1", "--gpu", "3", "--server", server,
             "--state", str(state)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert fault.returncode == 0, fault.stdout + fault.stderr
        expected = {
            "GpuXidError": {"Hostname": "alerts-0", "gpu": "2", "severity": "warning"},
            "GpuFallenOffTheBus": {"Hostname": "alerts-0", "gpu": "1", "severity": "critical"},
            "GpuTooHot": {"Hostname": "alerts-0", "gpu": "4"},
            "GpufleetWorkloadPendingTooLong": {"queue": "team-a", "reason": "NoFit", "slo": "1h"},
            "GpufleetQueueStarved": {"queue": "team-a", "flavor": "H100-80GB"},
        }

        def all_expected() -> dict[str, list[dict[str, str]]] | None:
            firing = p.firing()
            return firing if all(_has(firing, a, **ls) for a, ls in expected.items()) else None

        firing = _wait(f"alerts {sorted(expected)}", all_expected, log)
        assert set(firing) == set(expected), firing  # and nothing else
        assert p.value('sum(gpufleet_evictions_total{queue="team-a",reason="GPUFailure"})') == 1
        assert p.value('sum(gpufleet_gpus{state="unhealthy"})') == 1
        # The dashboards' queries on the same series: all valid, and all with data but where this
        # fleet has none to show.
        assert _dashboard_queries_without_data(p) <= MAY_BE_EMPTY

        # The agent and the control plane go away: their down alerts fire.
        exporter.stop()
        _stop(up)
        _wait(
            "the down alerts",
            lambda: (
                _has(p.firing(), "GpufleetAgentDown", job="gpufleet-agent")
                and _has(p.firing(), "GpufleetSchedulerDown", job="gpufleet-scheduler")
            ),
            log,
        )
    finally:
        monitor.stop()
        exporter.stop()
        _stop(up)
        if prom is not None:
            _stop(prom)
        up_log.close()
        prom_log.close()


# The dashboards' variables as this fleet fills them.
VARIABLES = {
    "$__rate_interval": "1m",
    "$queue": "team-a",
    "$namespace": "team-a",
    "$trainingjob": "llm",
    "$node": "alerts-0",
}


# Panels this fleet has nothing for: the in-process agent attributes no GPU to a pod (no kubelet), the job
# takes no checkpoints, its queue holds no GPU once evicted, and a counter born a moment ago has no rate.
MAY_BE_EMPTY = {
    "trainingjob: Workers' GPU busy time",
    "trainingjob: Workers' GPU memory used",
    "trainingjob: Workers' GPU power",
    "trainingjob: Workers' XID errors",
    "node: Held by",
    "trainingjob: Checkpoint age",
    "trainingjob: Checkpoint interval",
    "trainingjob: Checkpoint age against its interval",
    "queue: GPUs held on each pool",
    "queue: Preemptions and evictions by reason",
    "fleet: Preemptions and evictions by reason",
}


def _dashboard_queries_without_data(p: Prometheus) -> set[str]:
    """Every panel query of the dashboards, run on this fleet's series: each must be valid PromQL to
    Prometheus; returns the titles of the panels whose queries found nothing."""
    empty: set[str] = set()
    for stem, build in dashboards.DASHBOARDS.items():
        for panel in build()["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for name, value in VARIABLES.items():
                    expr = expr.replace(name, value)
                response = httpx.get(f"{p.api}/query", params={"query": expr}, timeout=5)
                assert response.status_code == 200, (stem, panel["title"], expr, response.text)
                if not response.json()["data"]["result"]:
                    empty.add(f"{stem}: {panel['title']}")
    return empty


def _reachable(server: str) -> bool:
    try:
        return httpx.get(server, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False
