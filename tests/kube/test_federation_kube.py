"""Federation over API servers: a manager cluster and two Kubernetes workers, each an in-memory API
server, driven pass by pass on a virtual clock (the e2e with real API servers is
tests/e2e_k8s/test_federation.py)."""

from __future__ import annotations

import base64
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.inference import InferenceService
from gpufleet.api.queue import Queue
from gpufleet.api.training import TrainingJob
from gpufleet.api.validation import parse_object
from gpufleet.cli.kube_federation import ManagerLoop, WorkerLoop
from gpufleet.federation.link import CLUSTER, FENCED, GENERATION, MANAGED_BY
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.state import FleetState
from gpufleet.kube.federation import KubeWorker, WorkerUnreachable, connect_kube
from gpufleet.kube.store import KubeStore
from gpufleet.kube.transport import Json

from .fakeapi import FakeApiServer

START = 1_900_000_000.0
LEASE = 10.0
GRACE = 2.0
SECRETS = "/api/v1/namespaces/gpufleet-system/secrets"


def kubeconfig(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": f"https://{name}.example:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": name, "user": "u"}}],
        "current-context": "c",
    }


def secret(name: str, data: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-kubeconfig", "namespace": "gpufleet-system"},
        "data": {"kubeconfig": base64.b64encode(data.encode()).decode()},
    }


def cluster(name: str, price: float) -> Cluster:
    obj = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {
                "connection": {"kubeconfigSecretRef": {"name": f"{name}-kubeconfig", "key": "kubeconfig"}},
                "pricePerGPUHour": {"H100-80GB": price},
                "leaseSeconds": LEASE,
            },
        }
    )
    assert isinstance(obj, Cluster)
    return obj


def job(name: str, gpus: int = 8) -> TrainingJob:
    obj = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"queue": "fleet", "replicas": 1, "worker": {"gpus": gpus}},
        }
    )
    assert isinstance(obj, TrainingJob)
    return obj


def fleet(hosts: int) -> FleetState:
    state = FleetState()
    for i in range(hosts):
        state.add_node(NodeSpec(f"h{i}", gpu_model="H100-80GB", gpus=8))
    return state


@dataclass
class Federation:
    manager: FakeApiServer = field(default_factory=FakeApiServer)
    workers: dict[str, FakeApiServer] = field(
        default_factory=lambda: {"w1": FakeApiServer(), "w2": FakeApiServer()}
    )
    silent: set[str] = field(default_factory=set)
    connected: list[str] = field(default_factory=list)
    """The servers the manager made a client for, in order."""
    now: float = START

    def __post_init__(self) -> None:
        store = KubeStore(self.manager)
        self.manager.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "gpufleet-system"}})
        for name, price in (("w1", 1.0), ("w2", 2.0)):
            self.manager.request("POST", SECRETS, body=secret(name, yaml.safe_dump(kubeconfig(name))))
            store.create(cluster(name, price))
        queue = parse_object(
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": "fleet"},
                "spec": {"quotas": {"H100-80GB": {"nominal": 16}}},
            }
        )
        store.create(queue)
        self.store = store
        self.loop = ManagerLoop(
            self.manager, grace_seconds=GRACE, connect_transport=self._reach, clock=lambda: self.now
        )
        self.agents = {
            name: WorkerLoop(api, self.manager, name, lambda: fleet(2), clock=lambda: self.now)
            for name, api in self.workers.items()
        }

    def _reach(self, config: dict[str, Any]) -> FakeApiServer:
        server = config["clusters"][0]["cluster"]["server"]
        self.connected.append(server)
        return self.workers[server.removeprefix("https://").split(".")[0]]

    def run(self, seconds: float, step: float = 0.5) -> None:
        end = self.now + seconds
        while self.now < end:
            for name, agent in self.agents.items():
                if name not in self.silent:
                    agent.step(self.now)
            self.loop.step(self.now)
            self.now += step

    def copy_in(self, worker: str, name: str) -> TrainingJob | None:
        try:
            return KubeStore(self.workers[worker]).get(TrainingJob, name, "team")
        except NotFoundError:
            return None

    def held(self, name: str) -> TrainingJob:
        return self.store.get(TrainingJob, name, "team")


@pytest.fixture
def fed() -> Federation:
    return Federation()


def test_a_job_submitted_to_the_manager_runs_in_the_cheaper_worker_and_its_status_comes_back(
    fed: Federation,
) -> None:
    fed.store.create(job("train"))
    fed.run(3)
    held = fed.held("train")
    assert held.metadata.annotations[CLUSTER] == "w1", "the cheaper worker"
    copy = fed.copy_in("w1", "train")
    assert copy is not None and copy.metadata.annotations[MANAGED_BY] == "manager"
    assert copy.spec.suspend is False, "started once the worker's lease held"
    assert fed.copy_in("w2", "train") is None
    worker_queue = KubeStore(fed.workers["w1"]).get(Queue, "fleet")
    assert worker_queue.spec.quotas["H100-80GB"].nominal == 8, "the queue gets the manager's grant"

    # The worker's operator runs it and says so in an Event: both come back to the manager.
    worker = KubeStore(fed.workers["w1"])
    copy.status.phase = "Running"
    worker.update_status(copy)
    event = {
        "metadata": {"name": "train.1", "namespace": "team"},
        "involvedObject": {"kind": "TrainingJob", "name": "train", "namespace": "team"},
        "reason": "Started",
        "message": "1 worker running",
        "type": "Normal",
        "lastTimestamp": "2030-03-17T17:46:40Z",
    }
    fed.workers["w1"].request("POST", "/api/v1/namespaces/team/events", body=event)
    fed.run(6)
    assert fed.held("train").status.phase == "Running"
    events = fed.manager.request("GET", "/api/v1/namespaces/team/events")["items"]
    mirrored = [e for e in events if e["reason"] == "Started"]
    assert [e["message"] for e in mirrored] == ["[w1] 1 worker running"]
    assert mirrored[0]["involvedObject"]["kind"] == "TrainingJob"
    assert any(e["reason"] == "Dispatched" for e in events), "the manager's own Event, as core/v1"

    fed.store.delete(TrainingJob, "train", "team")
    fed.run(2)
    assert fed.copy_in("w1", "train") is None, "deleted in the manager: gone from the worker"


def test_an_inference_service_goes_to_a_worker_like_a_job(fed: Federation) -> None:
    service = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "serving"},
            "spec": {"queue": "fleet", "replicas": {"min": 1, "max": 2}, "replica": {"gpus": 1}},
        }
    )
    assert isinstance(service, InferenceService)
    fed.store.create(service)
    fed.run(3)
    assert fed.store.get(InferenceService, "chat", "serving").metadata.annotations[CLUSTER] == "w1"
    copy = KubeStore(fed.workers["w1"]).get(InferenceService, "chat", "serving")
    assert copy.metadata.annotations[MANAGED_BY] == "manager" and copy.spec.suspend is False
    assert KubeStore(fed.workers["w1"]).get(Queue, "fleet").spec.quotas["H100-80GB"].nominal == 2


def test_a_replaced_kubeconfig_secret_gets_a_new_client(fed: Federation) -> None:
    fed.store.create(job("train"))
    fed.run(3)
    assert fed.connected == ["https://w1.example:6443", "https://w2.example:6443"], "one client each"
    moved = kubeconfig("w1")
    moved["clusters"][0]["cluster"]["server"] = "https://w1.example:7443"  # the same worker, a new address
    body = secret("w1", yaml.safe_dump(moved))
    fed.manager.request("PUT", f"{SECRETS}/w1-kubeconfig", body=body)
    fed.run(2)
    assert fed.connected[2:] == ["https://w1.example:7443"]
    assert fed.held("train").metadata.annotations[CLUSTER] == "w1", "its copy is still there"


def test_a_queue_quota_counts_the_work_of_both_workers(fed: Federation) -> None:
    hosts = {"w1": 1}  # free hosts w1 reports: none once `a` runs there
    fed.agents["w1"] = WorkerLoop(
        fed.workers["w1"], fed.manager, "w1", lambda: fleet(hosts["w1"]), clock=lambda: fed.now
    )
    fed.store.create(job("a"))
    fed.run(3)
    hosts["w1"] = 0
    fed.run(3)
    fed.store.create(job("b"))
    fed.run(3)
    assert fed.held("a").metadata.annotations[CLUSTER] == "w1"
    assert fed.held("b").metadata.annotations[CLUSTER] == "w2", "w1 is full"
    fed.store.create(job("c"))
    fed.run(3)
    c = fed.held("c")
    assert CLUSTER not in c.metadata.annotations, "w2 has room, but the queue's 16 GPUs are in use"
    assert c.status.phase == "Pending"
    assert c.status.pending_reason is not None and c.status.pending_reason.type == "QuotaExceeded"


def test_work_of_a_silent_worker_moves_after_its_lease_and_is_fenced_there(fed: Federation) -> None:
    fed.store.create(job("train"))
    fed.run(3)
    assert fed.held("train").metadata.annotations[CLUSTER] == "w1"
    fed.silent.add("w1")  # it no longer reports: its lease runs out
    fed.run(LEASE + GRACE - 2)
    assert fed.held("train").metadata.annotations[CLUSTER] == "w1", "not before lease and grace"
    fed.run(4)
    held = fed.held("train")
    assert held.metadata.annotations[CLUSTER] == "w2"
    assert held.metadata.annotations[GENERATION] == "2"
    assert fed.copy_in("w2", "train") is not None

    # The silent worker's own agent, stepped again after its lease, fences what it held (had the
    # manager not removed it already).
    left = fed.copy_in("w1", "train")
    assert left is None or FENCED in left.metadata.annotations


def test_a_worker_that_loses_the_manager_for_longer_than_its_lease_stops_its_managed_work(
    fed: Federation,
) -> None:
    fed.store.create(job("train"))
    fed.run(3)
    assert fed.copy_in("w1", "train") is not None
    agent = fed.agents["w1"]
    fed.manager.fail_next(1000, status=0)  # the manager cluster is gone: no ack, no pass
    end = agent.agent.lease.ends()
    assert end is not None and end > fed.now + LEASE / 2
    while fed.now < end:
        agent.step(fed.now)
        copy = fed.copy_in("w1", "train")
        assert copy is not None and not copy.spec.suspend, "within the lease it goes on"
        fed.now += 0.5
    fed.now = end + 0.01
    agent.step(fed.now)
    copy = fed.copy_in("w1", "train")
    assert copy is not None and copy.spec.suspend and FENCED in copy.metadata.annotations


def test_a_worker_that_cannot_read_its_own_api_server_sends_no_heartbeat(fed: Federation) -> None:
    fed.run(2)
    heard = fed.store.get(Cluster, "w1").status.heartbeat_time
    assert heard is not None
    fed.workers["w1"].fail_next(100, status=0)
    fed.agents["w1"].step(fed.now + 10)
    assert fed.store.get(Cluster, "w1").status.heartbeat_time == heard


def test_a_cluster_whose_secret_is_missing_or_malformed_is_refused_with_the_field() -> None:
    manager = FakeApiServer()
    connect = connect_kube(manager, lambda _config: FakeApiServer())
    with pytest.raises(NotFoundError, match="kubeconfigSecretRef names Secret gpufleet-system/w1-kubeconfig"):
        connect(cluster("w1", 1.0))
    manager.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "gpufleet-system"}})
    manager.request("POST", SECRETS, body=secret("w1", "just: text"))
    with pytest.raises(ValidationError, match="not a kubeconfig") as err:
        connect(cluster("w1", 1.0))
    assert err.value.field == "spec.connection.kubeconfigSecretRef"


def test_an_unreachable_worker_is_a_gpufleet_error() -> None:
    worker = FakeApiServer()
    worker.fail_next(1, status=0)
    with pytest.raises(WorkerUnreachable, match="Cluster w9"):
        KubeWorker(worker, name="w9").list_managed()


def test_a_worker_that_hangs_costs_the_manager_its_timeout_not_the_clients_default() -> None:
    from gpufleet.kube.client import KubeTransport

    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        config = kubeconfig("hung")
        config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
        api = KubeTransport.from_kubeconfig_data(config, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(WorkerUnreachable):
            KubeWorker(api, name="hung").list_queues()
        assert time.monotonic() - started < 3


def test_the_scheduler_gives_a_federation_worker_its_fleet_as_the_last_pass_left_it() -> None:
    from gpufleet.federation.summary import summarize
    from gpufleet.kube.scheduler import KubeScheduler

    from .test_scheduler import add_node, run

    api = FakeApiServer()
    sched = KubeScheduler(api, clock=lambda: START, bind_workers=0)
    assert sched.fleet_copy() is None, "no pass yet: nothing true to report"
    add_node(api, "n1")
    run(sched)
    copy = sched.fleet_copy()
    assert copy is not None and summarize(copy)["H100-80GB"].free_gpus == 8
    assert sched.kcache.cache is not None and copy is not sched.kcache.cache.fleet, "a copy, not the live one"
