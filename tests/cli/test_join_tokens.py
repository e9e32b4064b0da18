"""`gpufleet cluster join` end to end in this process: a manager plane and a worker plane, each a store with
its HTTP API on loopback, on one virtual clock. The join mints a federation token in each plane and the
federation runs on those alone: the manager's token in the worker writes only managed work, the
worker's token in the manager only its own Cluster's status; `cluster leave` revokes both."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import NotFoundError
from gpufleet.api.queue import Queue
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret
from gpufleet.api.training import TrainingJob
from gpufleet.cli.client import PREFIX, AuthError
from gpufleet.federation.join import MANAGER_SECRET
from gpufleet.federation.link import CLUSTER, MANAGED_BY
from gpufleet.store.sqlite import SqliteStore

from .conftest import Result
from .joined_planes import WORKER_FLEET, Federation, joined_planes

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team}
spec: {queue: team, replicas: 1, worker: {gpus: 8, gpuModel: H100-80GB}, durationSeconds: 3600}
"""


@pytest.fixture
def federation(tmp_path: Path) -> Iterator[Federation]:
    with joined_planes(tmp_path) as (manager, worker, clock, runtimes):
        yield Federation(manager, worker, clock, runtimes)


def secret_value(store: SqliteStore, name: str, key: str) -> str:
    return store.get(Secret, name, SYSTEM_NAMESPACE).value(key)


def test_a_join_runs_the_federation_on_scoped_tokens_and_leave_revokes_them(
    federation: Federation, cli: Callable[..., Result]
) -> None:
    manager, worker = federation.manager, federation.worker
    manager_admin, worker_admin = manager.tokens.admin_token, worker.tokens.admin_token
    addressing = ("--manager", manager.server.url, "--manager-token", manager_admin)
    worker_args = ("--server", worker.server.url, "--token", worker_admin)
    joined = cli("cluster", "join", "w1", *addressing, "--lease-seconds", "10", *worker_args)
    assert joined.code == 0, joined.err

    into_worker = secret_value(manager.store, "cluster-w1-token", "token")
    into_manager = secret_value(worker.store, MANAGER_SECRET, "token")
    assert into_worker != worker_admin and into_manager != manager_admin, "no admin token leaves its plane"
    assert worker.client(into_worker).get("/v1/whoami") == {
        "admin": False,
        "queue": None,
        "role": "federation-manager",
        "cluster": "w1",
    }
    assert manager.client(into_manager).get("/v1/whoami")["role"] == "federation-worker"

    # The federation runs on those tokens: heartbeats, dispatch, the queue's grant, status back.
    manager.store.apply(load_objects(JOB)[0])
    federation.until(
        "llm running in w1", lambda: manager.store.get(TrainingJob, "llm", "team").status.phase == "Running"
    )
    held = manager.store.get(TrainingJob, "llm", "team")
    assert held.metadata.annotations[CLUSTER] == "w1"
    copy = worker.store.get(TrainingJob, "llm", "team")
    assert copy.metadata.annotations[MANAGED_BY] == "manager" and copy.status.phase == "Running"
    assert manager.store.get(Cluster, "w1").status.heartbeat_time is not None

    # What each token may not do is refused, naming the kind and the verb.
    as_manager = worker.client(into_worker)
    own = load_objects(JOB.replace("name: llm", "name: own"))[0].to_dict()
    with pytest.raises(
        AuthError, match=r"may create only TrainingJob objects marked gpufleet\.io/managed-by"
    ):
        as_manager.apply([own])
    with pytest.raises(AuthError, match="may not read secrets"):
        as_manager.get(f"{PREFIX}/namespaces/{SYSTEM_NAMESPACE}/secrets")
    with pytest.raises(AuthError, match="may not change or delete GPUPool"):
        as_manager.apply([load_objects(WORKER_FLEET.replace("nodes: 1", "nodes: 9"))[0].to_dict()])
    as_worker = manager.client(into_manager)
    with pytest.raises(AuthError, match="may not create TrainingJob"):
        as_worker.apply([own])
    with pytest.raises(AuthError, match="may not write the status of trainingjobs"):
        as_worker.request("PUT", f"{PREFIX}/namespaces/team/trainingjobs/llm/status", json={"status": {}})
    with pytest.raises(AuthError, match="may not read queues"):
        as_worker.get(f"{PREFIX}/queues")

    # Deleted in the manager: its copy goes from the worker, and so does the queue the manager made.
    assert worker.store.get(Queue, "team").metadata.annotations[MANAGED_BY] == "manager"
    manager.store.delete(TrainingJob, "llm", "team")
    federation.until(
        "the copy and its queue gone from w1",
        lambda: not list(worker.store.list(TrainingJob)) and not list(worker.store.list(Queue)),
    )

    # Leaving: the Cluster goes, and neither token works any more.
    # `leave` waits for the manager to take the work back: the planes go on meanwhile, in a thread.
    stop = threading.Event()

    def go_on() -> None:
        while not stop.is_set():
            federation.run(1)
            stop.wait(0.02)

    running = threading.Thread(target=go_on, daemon=True)
    running.start()
    try:
        left = cli("cluster", "leave", "w1", *addressing, "--wait-seconds", "60", *worker_args)
    finally:
        stop.set()
        running.join(timeout=30)
    assert left.code == 0, left.err
    with pytest.raises(NotFoundError):
        manager.store.get(Cluster, "w1")
    for plane, token in ((worker, into_worker), (manager, into_manager)):
        with pytest.raises(AuthError, match="unknown token"):
            plane.client(token).get("/v1/whoami")
    assert worker.client(worker_admin).get("/v1/whoami")["admin"], "the admin tokens stay"
