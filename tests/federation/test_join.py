"""Joining over the network (`federation.join`): the manager finds a worker's token through the Secret
its Cluster names, and a plane becomes a worker when its join Secret appears; when the Secret goes, its
managed work is fenced at once rather than left running without a lease."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api import Cluster, load_objects
from gpufleet.api.errors import NotFoundError
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret
from gpufleet.api.training import TrainingJob
from gpufleet.federation.join import (
    MANAGER_SECRET,
    JoinedWorker,
    JoinSettings,
    connection_version,
    join_secret,
    token_secret,
    worker_token,
)
from gpufleet.federation.link import FENCED, MANAGED_BY, ManagerLink
from gpufleet.federation.worker import WorkerAgent
from gpufleet.fleet.state import FleetState
from gpufleet.store.sqlite import SqliteStore

CLUSTER = """
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {name: w1}
spec:
  connection: {embedded: {url: "http://127.0.0.1:1", tokenSecretRef: {name: cluster-w1-token, key: token}}}
  leaseSeconds: 10
"""

MANAGED = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team, annotations: {gpufleet.io/managed-by: manager}}
spec: {queue: team, replicas: 1, worker: {gpus: 8}, suspend: true}
"""


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF")


def cluster() -> Cluster:
    obj = load_objects(CLUSTER)[0]
    assert isinstance(obj, Cluster)
    return obj


def test_the_manager_reads_a_worker_token_from_the_secret_its_cluster_names(store: SqliteStore) -> None:
    with pytest.raises(NotFoundError, match=r"Cluster w1.*Secret gpufleet-system/cluster-w1-token"):
        worker_token(store, cluster())
    secret, ref = token_secret("w1", "tok-1")
    assert (ref.name, ref.key) == ("cluster-w1-token", "token"), "what `cluster join` writes is what it names"
    store.apply(secret)
    assert worker_token(store, cluster()) == "tok-1"


class Manager:
    """A manager that accepts every heartbeat."""

    def __init__(self) -> None:
        self.beats = 0
        self.lease: float | None = None

    def read_cluster(self, name: str) -> Cluster:
        return cluster()

    def write_cluster_status(self, written: Cluster) -> None:
        self.beats += 1
        self.lease = written.status.lease_seconds


def test_a_plane_reports_once_joined_and_fences_its_managed_work_when_unjoined(store: SqliteStore) -> None:
    manager = Manager()
    links: list[JoinSettings] = []

    def link(settings: JoinSettings) -> ManagerLink:
        links.append(settings)
        return manager

    worker = JoinedWorker(store, link, lambda: FleetState(), heartbeat_seconds=2.0)
    store.apply(load_objects(MANAGED)[0])
    worker.step(0.0)
    assert manager.beats == 0 and links == [], "not joined: a plain plane"

    settings = JoinSettings("http://manager:8080", "manager-token", "w1")
    store.apply(join_secret(settings))
    worker.step(1.0)
    assert links == [settings] and manager.beats == 1
    assert "manager-token" not in repr(settings)
    assert not store.get(TrainingJob, "llm", "team").spec.suspend, "started inside the lease"

    store.delete(Secret, MANAGER_SECRET, SYSTEM_NAMESPACE)
    worker.step(2.0)  # well inside the lease: only leaving fences it now
    job = store.get(TrainingJob, "llm", "team")
    assert job.spec.suspend and job.metadata.annotations[FENCED] == "LeaseExpired"
    assert job.metadata.annotations[MANAGED_BY] == "manager"


def test_joining_the_same_manager_again_keeps_the_work_and_another_manager_fences_it(
    store: SqliteStore,
) -> None:
    """A join mints a new token each time: joining the same manager again (to change the lease, say)
    must not stop the work that manager placed here, while a join to another manager must."""
    manager = Manager()
    links: list[JoinSettings] = []

    def link(settings: JoinSettings) -> ManagerLink:
        links.append(settings)
        return manager

    worker = JoinedWorker(store, link, lambda: FleetState(), heartbeat_seconds=2.0)
    store.apply(load_objects(MANAGED)[0])
    store.apply(join_secret(JoinSettings("http://manager:8080", "token-1", "w1")))
    worker.step(0.0)
    assert not store.get(TrainingJob, "llm", "team").spec.suspend

    renewed = JoinSettings("http://manager:8080", "token-2", "w1")
    store.apply(join_secret(renewed))
    worker.step(1.0)
    job = store.get(TrainingJob, "llm", "team")
    assert not job.spec.suspend and FENCED not in job.metadata.annotations, "the same manager: work goes on"
    assert links[-1] == renewed, "the manager is reached with the new token"
    beats = manager.beats
    worker.step(3.0)
    assert manager.beats > beats, "the same lease is renewed"

    store.apply(join_secret(JoinSettings("http://other:8080", "token-3", "w1")))
    worker.step(4.0)
    job = store.get(TrainingJob, "llm", "team")
    assert job.spec.suspend and job.metadata.annotations[FENCED] == "LeaseExpired", "another manager"


def test_a_short_lease_is_renewed_four_times_over(store: SqliteStore) -> None:
    """A 10 s lease with 5 s heartbeats would lapse after one lost heartbeat; the agent beats every
    2.5 s instead, once it has learnt the lease from the manager's first ack."""
    manager = Manager()
    agent = WorkerAgent(store, "w1", manager, lambda: FleetState(), heartbeat_seconds=5.0)
    wakes = [agent.step(0.0)]
    assert manager.beats == 1 and wakes == [2.5]
    for now in (1.0, 2.5, 4.0, 5.0, 7.5):
        agent.step(now)
    assert manager.beats == 4, "at 0, 2.5, 5 and 7.5 s"
    assert manager.lease == 10, "each heartbeat says the lease the worker counts it with"


def test_a_new_token_or_url_is_a_new_connection(store: SqliteStore) -> None:
    first, _ = token_secret("w1", "tok-1")
    store.apply(first)
    before = connection_version(store, cluster())
    store.apply(token_secret("w1", "tok-2")[0])  # the worker joined again with a new token
    assert connection_version(store, cluster()) != before
    moved = cluster()
    assert moved.spec.connection.embedded is not None
    moved.spec.connection.embedded.url = "http://127.0.0.1:2"
    assert connection_version(store, moved) != connection_version(store, cluster())
