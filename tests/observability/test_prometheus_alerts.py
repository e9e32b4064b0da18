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

import time
from pathlib import Path

import httpx
import pytest

from gpufleet.agent.config import parse_config
from gpufleet.agent.exporter import DcgmCollector, MetricsServer
from gpufleet.agent.health import HealthMonitor, HealthState
from gpufleet.agent.nvml import RecordedNvml
from gpufleet.observability import dashboards

from .promharness import (
    PROMETHEUS,
    SKIP_REASON,
    Firing,
    Prometheus,
    free_port,
    gpufleet,
    has,
    reachable,
    start_prometheus,
    start_up,
    stop,
    wait,
)

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


@pytest.mark.slow
def test_faults_in_a_twin_and_on_a_node_fire_the_expected_alerts(run_dir: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip(SKIP_REASON)
    state = run_dir / "state"
    api_port, web_port = free_port(), free_port()
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
    up = start_up(run_dir, FLEET, time_scale=600, port=api_port)
    prom = None
    monitor.start()
    exporter.start()
    try:
        wait(
            "gpufleet up", lambda: (state / "admin-token").exists() and reachable(server), run_dir / "up.log"
        )
        prom = start_prometheus(run_dir, api_port=api_port, agent_port=exporter.port, web_port=web_port)
        p = Prometheus(web_port)

        # Healthy: the job runs on all 16 GPUs, both targets are up, and no alert fires.
        wait("the job's 16 GPUs", lambda: p.value('sum(gpufleet_gpus{state="allocated"})') == 16, log)
        wait("both targets up", lambda: p.value("sum(up)") == 2, log)
        # (The job waited a moment at the start: what that raised clears at the next evaluations.)
        wait("no alert firing", lambda: p.firing() == {}, log)

        # Faults: an XID and a GPU off the bus seen by the agent's health monitor, a GPU running hot,
        # and a failed GPU in the twin, whose 8-GPU workers then no longer fit on its node.
        faulted = time.time()
        nvml.inject_xid(node.gpus[2].uuid, 94)
        nvml.lose_gpu(node.gpus[1].uuid)
        nvml.set_telemetry(node.gpus[4].uuid, gpu_temp_c=91.0)
        gpufleet("fault", "gpu-failure", "alerts-1", "--gpu", "3", server=server, state=state)
        expected = {
            "GpuXidError": {"Hostname": "alerts-0", "gpu": "2", "severity": "warning"},
            "GpuFallenOffTheBus": {"Hostname": "alerts-0", "gpu": "1", "severity": "critical"},
            "GpuTooHot": {"Hostname": "alerts-0", "gpu": "4"},
            "GpufleetWorkloadPendingTooLong": {"queue": "team-a", "reason": "NoFit", "slo": "1h"},
            "GpufleetQueueStarved": {"queue": "team-a", "flavor": "H100-80GB"},
        }

        def all_expected() -> Firing | None:
            firing = p.firing()
            return firing if all(has(firing, a, **ls) for a, ls in expected.items()) else None

        firing = wait(f"alerts {sorted(expected)}", all_expected, log)
        assert set(firing) == set(expected), firing  # and nothing else
        assert p.value('sum(gpufleet_evictions_total{queue="team-a",reason="GPUFailure"})') == 1
        assert p.value('sum(gpufleet_gpus{state="unhealthy"})') == 1
        # The dashboards' queries on the same series since the faults: all valid, and all with data
        # but where this fleet has none to show. (Since, not now: the twin repairs the failed GPU an
        # hour of fleet time later, seconds here, and the job then pends no more.)
        assert _dashboard_queries_without_data(p, since=faulted) <= MAY_BE_EMPTY

        # The agent and the control plane go away: their down alerts fire.
        exporter.stop()
        stop(up)
        wait(
            "the down alerts",
            lambda: (
                has(p.firing(), "GpufleetAgentDown", job="gpufleet-agent")
                and has(p.firing(), "GpufleetSchedulerDown", job="gpufleet-scheduler")
            ),
            log,
        )
    finally:
        monitor.stop()
        exporter.stop()
        stop(up)
        if prom is not None:
            stop(prom)


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


def _dashboard_queries_without_data(p: Prometheus, *, since: float) -> set[str]:
    """Every panel query of the dashboards, run on this fleet's series from `since` (Unix time) to now,
    as a panel's graph runs it: each must be valid PromQL to Prometheus; returns the titles of the
    panels whose queries found nothing in that range."""
    window = {"start": f"{since:.3f}", "end": f"{time.time():.3f}", "step": "1"}
    empty: set[str] = set()
    for stem, build in dashboards.DASHBOARDS.items():
        for panel in build()["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for name, value in VARIABLES.items():
                    expr = expr.replace(name, value)
                response = httpx.get(f"{p.api}/query_range", params={"query": expr, **window}, timeout=5)
                assert response.status_code == 200, (stem, panel["title"], expr, response.text)
                if not response.json()["data"]["result"]:
                    empty.add(f"{stem}: {panel['title']}")
    return empty
