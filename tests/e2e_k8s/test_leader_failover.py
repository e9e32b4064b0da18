"""Two `gpufleet kube scheduler` processes share one Lease: one schedules; kill -9 it and the other binds a
new pod within 15 s. Stopped with SIGTERM, a leader hands the Lease over at once, and every change of
holder counts in `leaseTransitions`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import RUN, Cluster, wait_for

pytestmark = pytest.mark.k8s


def _replica(cluster: Cluster, identity: str, lease: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "gpufleet.cli.main",
        "kube",
        "scheduler",
        f"--scheduler-name={cluster.scheduler_name}",
        f"--namespace={cluster.namespace}",
        f"--lease={lease}",
        f"--identity={identity}",
        f"--kubeconfig={os.environ['KUBECONFIG']}",
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_failover_within_15_seconds(cluster: Cluster) -> None:
    lease = f"gpufleet-e2e-{RUN}"
    path = f"/apis/coordination.k8s.io/v1/namespaces/{cluster.namespace}/leases/{lease}"

    def holder() -> str | None:
        try:
            return cluster.api.request("GET", path).get("spec", {}).get("holderIdentity") or None
        except Exception:
            return None

    def transitions() -> int:
        return int(cluster.api.request("GET", path)["spec"].get("leaseTransitions") or 0)

    cluster.node("a")
    replicas = {name: _replica(cluster, name, lease) for name in ("one", "two")}
    try:
        leader = wait_for("a leader", holder, timeout=60)
        cluster.pod("before", gpus=1)
        assert wait_for("pod bound by the leader", lambda: cluster.node_of("before"), timeout=60)
        replicas[leader].send_signal(signal.SIGKILL)  # no release: the Lease must expire
        killed = time.monotonic()
        cluster.pod("after", gpus=1)  # waits for whoever leads next
        node = wait_for("pod bound by the standby", lambda: cluster.node_of("after"), timeout=30)
        took = time.monotonic() - killed
        standby = holder()
        assert node and standby and standby != leader, f"lease held by {standby!r} after {leader!r} died"
        assert replicas[standby].poll() is None
        assert took <= 15, f"the standby bound a new pod {took:.1f}s after the leader was killed"
        assert transitions() == 1
        # SIGTERM: the leader releases the Lease as it stops, and a new replica takes it over.
        replicas[standby].terminate()
        replicas[standby].wait(30)
        replicas["three"] = _replica(cluster, "three", lease)
        wait_for("the third replica leads", lambda: holder() == "three", timeout=30)
        assert transitions() == 2, "a take-over of a released Lease is a transition too"
    finally:
        for process in replicas.values():
            if process.poll() is None:
                process.terminate()
                process.wait(15)
