"""The worker agent reports its free GPUs at each heartbeat and also soon after they change (work
ended or started), at most once a second: the manager dispatches on its newest report, so GPUs freed
by ended work must not stay idle for a heartbeat period."""

from __future__ import annotations

from pathlib import Path

from gpufleet.api import Cluster, load_objects
from gpufleet.federation.worker import CHANGE_REPORT_SECONDS, WorkerAgent
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.store.sqlite import SqliteStore

CLUSTER = """
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {name: w1}
spec:
  connection: {embedded: {url: "http://127.0.0.1:1", tokenSecretRef: {name: w1-token, key: token}}}
  leaseSeconds: 60
"""


class Manager:
    """Accepts every heartbeat and keeps the free GPUs each reported."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, int]] = []

    def read_cluster(self, name: str) -> Cluster:
        cluster = load_objects(CLUSTER)[0]
        assert isinstance(cluster, Cluster)
        return cluster

    def write_cluster_status(self, written: Cluster) -> None:
        assert written.status.heartbeat_time is not None
        free = sum(m.free_gpus for m in written.status.capacity.values())
        self.reports.append((written.status.heartbeat_time.timestamp(), free))


def test_a_change_in_free_gpus_is_reported_within_a_second_not_at_the_next_heartbeat(tmp_path: Path) -> None:
    fleet = FleetState(())
    fleet.add_node(NodeSpec("n1", gpu_model="H100-80GB", gpus=8))
    manager = Manager()
    store = SqliteStore.open(tmp_path, synchronous="OFF")
    agent = WorkerAgent(store, "w1", manager, lambda: fleet, heartbeat_seconds=10.0)
    assert agent.step(0.0) == 10.0, "nothing changed: the next heartbeat"
    fleet.allocate("p1", 0, PodRequest(gpus=4), (0, 1, 2, 3))
    wake = agent.step(0.5)
    assert wake == CHANGE_REPORT_SECONDS and len(manager.reports) == 1, "at most one report a second"
    agent.step(1.0)
    assert manager.reports == [(0.0, 8), (1.0, 4)]
    assert agent.step(2.0) == 11.0, "reported: the heartbeat after the last report"
    fleet.release("p1")
    agent.step(3.0)
    assert manager.reports[-1] == (3.0, 8) and len(manager.reports) == 3
    store.close()


def test_a_change_later_in_the_instant_of_a_report_is_reported_in_that_instant(tmp_path: Path) -> None:
    # The scheduler places the work the manager just sent a round after the agent reported the job
    # that ended: the manager must not dispatch on the earlier count for a whole second.
    fleet = FleetState(())
    fleet.add_node(NodeSpec("n1", gpu_model="H100-80GB", gpus=8))
    manager = Manager()
    store = SqliteStore.open(tmp_path, synchronous="OFF")
    agent = WorkerAgent(store, "w1", manager, lambda: fleet, heartbeat_seconds=10.0)
    agent.step(5.0)
    fleet.allocate("p1", 0, PodRequest(gpus=4), (0, 1, 2, 3))
    agent.step(5.0)
    assert manager.reports == [(5.0, 8), (5.0, 4)]
    agent.step(5.0)
    assert len(manager.reports) == 2, "no change since: no second write in the instant"
    fleet.release("p1")
    agent.step(5.5)
    assert len(manager.reports) == 2, "a later instant still waits a second after the last report"
    agent.step(6.0)
    assert manager.reports[-1] == (6.0, 8)
    store.close()
