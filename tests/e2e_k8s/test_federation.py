"""Federation with three real API servers: one manager cluster and two worker clusters.

The manager cluster holds the Queue, the two Clusters (each with its worker's kubeconfig in a Secret)
and the TrainingJobs; `gpufleet kube manager`'s loop dispatches them. Each worker runs gpufleet's
scheduler, operator and worker loop (in this process, as the other e2e tests run theirs) and the
suite plays its kubelets on fake Nodes. The scenario, in order:

1. a TrainingJob submitted to the manager runs in the cheaper worker and its status comes back;
2. a queue's quota spans both workers: with one job in each, a third waits in the manager although a
   worker has room;
3. the first worker's API server is stopped: after its lease the manager moves its job to the other;
4. last, the manager's API server is stopped: past its lease a worker starts no managed work it has not
   started (a job dispatched there but not yet placed stays suspended and fenced, even once it would
   fit) and, by the lease rule, fences what runs (it kept running within the lease), since the manager
   may move that work once the lease and its grace are over.

Environment (each test is skipped without it, saying so):
- GPUFLEET_E2E_MANAGER: the manager cluster's kubeconfig;
- GPUFLEET_E2E_WORKERS: the two workers' kubeconfigs, comma-separated;
- GPUFLEET_E2E_STOP_WORKER: a shell command that stops the first worker's API server (step 3 only);
- GPUFLEET_E2E_STOP_MANAGER: a shell command that stops the manager's API server (step 4 only).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpufleet.api.labels import JOB_LABEL
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

from .conftest import RUN, Cluster, delete_run_events, remove_namespace, run_namespace, wait_for

MANAGER = os.environ.get("GPUFLEET_E2E_MANAGER", "")
WORKERS = [p for p in os.environ.get("GPUFLEET_E2E_WORKERS", "").split(",") if p]
STOP_WORKER = os.environ.get("GPUFLEET_E2E_STOP_WORKER", "")
STOP_MANAGER = os.environ.get("GPUFLEET_E2E_STOP_MANAGER", "")

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(
        not MANAGER or len(WORKERS) != 2,
        reason="GPUFLEET_E2E_MANAGER and GPUFLEET_E2E_WORKERS (two kubeconfigs) are not set: the "
        "federation e2e needs three API servers (see README, Kubernetes)",
    ),
]

GROUP = "/apis/gpufleet.io/v1alpha1"
LEASE_SECONDS = 6.0
GRACE_SECONDS = 2.0
NAMESPACE = f"gpufleet-fed-{RUN}"
QUEUE = f"fed-{RUN}"
SYSTEM = "gpufleet-system"


@dataclass
class Worker:
    """One worker cluster and the gpufleet components this process runs for it."""

    name: str
    api: Transport
    nodes: Cluster
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    up: bool = True
    lease_ends: Callable[[], float | None] = lambda: None
    """When its lease from the manager ends (its worker loop's, on the wall clock)."""

    def shut(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)


@dataclass
class Federation:
    manager: Transport
    workers: list[Worker]
    manager_up: bool = True
    watched: Callable[[], list[Any]] = list
    """The manager's watched copies of the workers' jobs (`ManagerLoop.caches`)."""

    def job(self, name: str) -> Json:
        return self.manager.request("GET", f"{GROUP}/namespaces/{NAMESPACE}/trainingjobs/{name}")

    def held_by(self, name: str) -> str | None:
        return (self.job(name)["metadata"].get("annotations") or {}).get("gpufleet.io/cluster")

    def bound_in(self, worker: Worker, job: str) -> list[str]:
        """Nodes of the job's pods in `worker` (its operator makes them, its scheduler binds them)."""
        pods = worker.api.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": f"{JOB_LABEL}={job}"}
        )["items"]
        return [p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")]


def _transport(path: str) -> Transport:
    from gpufleet.kube.client import KubeTransport

    return KubeTransport.from_environment(kubeconfig=path)


def _create(api: Transport, path: str, body: Json) -> None:
    try:
        api.request("POST", path, body=body)
    except ApiError as exc:
        if exc.status != 409:
            raise


def _play_kubelets(worker: Worker) -> None:
    """Bound pods run, pods asked to stop are gone: what the worker's kubelets would do."""
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    running = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    while not worker.stop.wait(0.5):
        try:
            worker.nodes.finish_deleting()
            for pod in worker.api.request("GET", pods)["items"]:
                if pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending":
                    name = pod["metadata"]["name"]
                    worker.api.request(
                        "PATCH",
                        f"{pods}/{name}/status",
                        body=running,
                        content_type=MERGE_PATCH,
                    )
        except ApiError:
            continue  # a worker whose API server is gone has no kubelets to play either


def _start_worker(worker: Worker, manager: Transport) -> None:
    from gpufleet.cli.kube_federation import WorkerLoop
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.operator import Operator
    from gpufleet.kube.scheduler import KubeScheduler

    name = worker.nodes.scheduler_name
    sched = KubeScheduler(
        worker.api, config=KubeConfig(scheduler_name=name), identity=f"e2e-{RUN}-{worker.name}", period=1.0
    )
    selector = ",".join(f"{k}={v}" for k, v in worker.nodes.selector.items())
    op = Operator(
        worker.api, config=KubeConfig(scheduler_name=name, namespace=NAMESPACE), period=1.0,
        node_selector=selector,
    )  # fmt: skip

    loop = WorkerLoop(worker.api, manager, worker.name, sched.fleet_copy, heartbeat_seconds=1.0)
    worker.lease_ends = loop.agent.lease.ends
    sched.informers.start(worker.stop)
    op.informers.start(worker.stop)
    for target in (sched.run, op.run, loop.run, lambda stop: _play_kubelets(worker)):
        thread = threading.Thread(target=target, args=(worker.stop,), daemon=True)
        thread.start()
        worker.threads.append(thread)


def _cluster(name: str, price: float) -> Json:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "connection": {"kubeconfigSecretRef": {"name": name, "namespace": SYSTEM, "key": "kubeconfig"}},
            "pricePerGPUHour": {"H100-80GB": price},
            "leaseSeconds": LEASE_SECONDS,
        },
    }


@pytest.fixture(scope="module")
def fed() -> Iterator[Federation]:
    from gpufleet.cli.kube_federation import ManagerLoop
    from gpufleet.kube.crds import install_crds

    manager = _transport(MANAGER)
    apis = [_transport(path) for path in WORKERS]
    for api in (manager, *apis):
        install_crds(api)
    names = [f"fed-{RUN}-w1", f"fed-{RUN}-w2"]
    state = Federation(manager, [])
    with contextlib.ExitStack() as stack:
        stack.enter_context(_unless_stopped(run_namespace(manager, NAMESPACE), state))
        _create(manager, "/api/v1/namespaces", {"metadata": {"name": SYSTEM}})
        queue = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": QUEUE},
                 "spec": {"quotas": {"H100-80GB": {"nominal": 16}}}}  # fmt: skip
        manager.request("POST", f"{GROUP}/queues", body=queue)
        stack.callback(_forget, manager, f"{GROUP}/queues/{QUEUE}")
        workers = []
        for index, (name, path, api) in enumerate(zip(names, WORKERS, apis, strict=True)):
            data = base64.b64encode(Path(path).read_bytes()).decode()
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": SYSTEM},
                      "data": {"kubeconfig": data}}  # fmt: skip
            manager.request("POST", f"/api/v1/namespaces/{SYSTEM}/secrets", body=secret)
            stack.callback(_forget, manager, f"/api/v1/namespaces/{SYSTEM}/secrets/{name}")
            manager.request("POST", f"{GROUP}/clusters", body=_cluster(name, price=1.0 + index))
            stack.callback(_forget, manager, f"{GROUP}/clusters/{name}")
            worker = Worker(name, api, Cluster(api, NAMESPACE))
            stack.callback(_leave, worker)
            _create(api, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            # Pods are refused until the namespace has a default ServiceAccount (no controller makes it).
            _create(api, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "default"}})
            for n in range(1 + index):  # w1: one 8-GPU node, w2: two
                worker.nodes.node(f"{name}-{n}")
            workers.append(worker)
        for worker in workers:
            _start_worker(worker, manager)
        loop = ManagerLoop(
            manager, manager=f"e2e-{RUN}", grace_seconds=GRACE_SECONDS, period_seconds=1.0, watch_workers=True
        )
        state.watched = lambda: loop.caches
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
        thread.start()
        stack.callback(thread.join, 10)
        stack.callback(stop.set)
        state.workers = workers
        yield state


@contextlib.contextmanager
def _unless_stopped(cleaned: contextlib.AbstractContextManager[str], fed: Federation) -> Iterator[None]:
    """`cleaned`, whose clean-up cannot reach a manager whose API server was stopped on purpose (it is
    started FRESH next time): then its refusal is dropped."""
    try:
        with cleaned:
            yield
    except ApiError:
        if fed.manager_up:
            raise


def _forget(api: Transport, path: str) -> None:
    with contextlib.suppress(ApiError):
        api.request("DELETE", path)


def _leave(worker: Worker) -> None:
    """After the run: its components stop, and what the run and the manager made there goes (nothing
    to clean where the API server was stopped on purpose: it is started FRESH next time)."""
    worker.shut()
    if not worker.up:
        return
    _forget(worker.api, f"{GROUP}/queues/{QUEUE}")
    worker.nodes.clear_nodes()
    delete_run_events(worker.api)
    left = remove_namespace(worker.api, NAMESPACE)
    assert not left, f"the run left {left} in {worker.name}"


def _job(name: str) -> Json:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "queue": QUEUE,
            "replicas": 1,
            "worker": {
                "gpus": 8,
                "cpu": "1",
                "memory": "1Gi",
                "nodeSelector": {"gpufleet.io/e2e-run": RUN},
                "template": {
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10"}],
                    }
                },
            },
        },
    }


def _submit(fed: Federation, name: str) -> None:
    fed.manager.request("POST", f"{GROUP}/namespaces/{NAMESPACE}/trainingjobs", body=_job(name))


def _free_gpus(fed: Federation, worker: Worker) -> int | None:
    cluster = fed.manager.request("GET", f"{GROUP}/clusters/{worker.name}")
    capacity = (cluster.get("status") or {}).get("capacity") or {}
    return capacity.get("H100-80GB", {}).get("freeGpus") if capacity else None


def test_federation_a_training_job_submitted_to_the_manager_runs_in_a_worker_and_its_status_comes_back(
    fed: Federation,
) -> None:
    w1, _w2 = fed.workers
    wait_for("both workers report", lambda: all(_free_gpus(fed, w) for w in fed.workers), timeout=60)
    _submit(fed, "a")
    assert wait_for("a dispatched", lambda: fed.held_by("a"), timeout=60) == w1.name, "the cheaper worker"
    assert wait_for("a bound in w1", lambda: fed.bound_in(w1, "a"), timeout=60) == [w1.nodes.nodes[0]]
    wait_for("a Running in the manager", lambda: fed.job("a").get("status", {}).get("phase") == "Running",
             timeout=60)  # fmt: skip
    caches = fed.watched()
    assert len(caches) == 2 and all(c.managed() is not None for c in caches), "it watches both workers"
    copy = w1.api.request("GET", f"{GROUP}/namespaces/{NAMESPACE}/trainingjobs/a")
    assert copy["metadata"]["annotations"]["gpufleet.io/managed-by"] == f"e2e-{RUN}"
    wait_for("w1 reports itself full", lambda: _free_gpus(fed, w1) == 0, timeout=60)

    def mirrored() -> list[Json]:
        events = fed.manager.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
        return [
            e
            for e in events
            if e["involvedObject"].get("name") == "a" and e["message"].startswith(f"[{w1.name}] ")
        ]

    wait_for("w1's Events about a, in the manager", mirrored, timeout=30)


def test_federation_a_queue_quota_spans_both_workers(fed: Federation) -> None:
    w1, w2 = fed.workers
    _submit(fed, "b")
    assert wait_for("b dispatched", lambda: fed.held_by("b"), timeout=60) == w2.name, "w1 is full"
    wait_for("b bound in w2", lambda: fed.bound_in(w2, "b"), timeout=60)
    _submit(fed, "c")

    def waiting_on_quota() -> bool:
        status = fed.job("c").get("status") or {}
        return (status.get("pendingReason") or {}).get("type") == "QuotaExceeded"

    wait_for("c waits on the queue's quota", waiting_on_quota, timeout=60)
    assert fed.held_by("c") is None, "w2 has 8 free GPUs, but a in w1 and b in w2 use the queue's 16"
    assert _free_gpus(fed, w2) == 8
    assert fed.held_by("a") == w1.name


@pytest.mark.skipif(not STOP_WORKER, reason="GPUFLEET_E2E_STOP_WORKER is not set: nothing stops a worker")
def test_federation_killing_a_workers_api_server_moves_its_work_to_the_other(fed: Federation) -> None:
    w1, w2 = fed.workers
    assert fed.held_by("a") == w1.name
    w1.up = False
    subprocess.run(STOP_WORKER, shell=True, check=True, timeout=60)  # the tester's own command
    w1.shut()

    def moved() -> bool:
        annotations = fed.job("a")["metadata"].get("annotations") or {}
        return annotations.get("gpufleet.io/cluster") == w2.name

    wait_for("a moved to w2", moved, timeout=LEASE_SECONDS + GRACE_SECONDS + 60)
    annotations = fed.job("a")["metadata"]["annotations"]
    assert annotations["gpufleet.io/assignment-generation"] == "2"
    assert len(wait_for("a bound in w2", lambda: fed.bound_in(w2, "a"), timeout=60)) == 1
    wait_for("a Running again", lambda: fed.job("a").get("status", {}).get("phase") == "Running", timeout=60)
    assert fed.held_by("b") == w2.name
    assert fed.held_by("c") is None, "the quota still holds: a and b use it all"


HOLD = "gpufleet.io/e2e-hold"
FENCED = "gpufleet.io/fenced"


def _copy(worker: Worker, job: str) -> Json:
    return worker.api.request("GET", f"{GROUP}/namespaces/{NAMESPACE}/trainingjobs/{job}")


def _fenced(worker: Worker, job: str) -> bool:
    copy = _copy(worker, job)
    return bool(copy["spec"].get("suspend")) and FENCED in (copy["metadata"].get("annotations") or {})


@pytest.mark.skipif(not STOP_MANAGER, reason="GPUFLEET_E2E_STOP_MANAGER is not set: nothing stops it")
def test_federation_a_worker_that_loses_its_manager_starts_nothing_past_its_lease(fed: Federation) -> None:
    """Last (it stops the manager's API server): a job dispatched to w2 but not placed there yet is not
    started past the lease, even once it fits; what runs goes on within the lease and is fenced after."""
    w2 = fed.workers[1]
    # Room in w2 that the dispatcher counts but d's pods cannot use: the one node with the label d asks
    # for carries a taint d does not tolerate (a summary reports only the taints every host carries),
    # and quota for d in place of c: d goes to w2 and waits there unplaced.
    spare = w2.nodes.node(f"{w2.name}-spare")
    held_back = {
        "metadata": {"labels": {HOLD: RUN}},
        "spec": {"taints": [{"key": HOLD, "effect": "NoSchedule"}]},
    }
    w2.api.request("PATCH", f"/api/v1/nodes/{spare}", body=held_back, content_type=MERGE_PATCH)
    fed.manager.request("DELETE", f"{GROUP}/namespaces/{NAMESPACE}/trainingjobs/c")
    quota = {"spec": {"quotas": {"H100-80GB": {"nominal": 24}}}}
    fed.manager.request("PATCH", f"{GROUP}/queues/{QUEUE}", body=quota, content_type=MERGE_PATCH)
    held = _job("d")
    held["spec"]["worker"]["nodeSelector"][HOLD] = RUN
    fed.manager.request("POST", f"{GROUP}/namespaces/{NAMESPACE}/trainingjobs", body=held)
    assert wait_for("d dispatched", lambda: fed.held_by("d"), timeout=60) == w2.name
    wait_for("d let start in w2", lambda: _copy(w2, "d")["spec"].get("suspend") is False, timeout=30)
    assert fed.bound_in(w2, "d") == [], "the only node with its label does not take it yet"
    running = [job for job in ("a", "b") if fed.held_by(job) == w2.name]
    assert running and all(fed.bound_in(w2, job) for job in running)

    fed.manager_up = False
    subprocess.run(STOP_MANAGER, shell=True, check=True, timeout=60)  # the tester's own command
    ends = w2.lease_ends()
    assert ends is not None
    checks = 0
    while time.time() < ends - 0.5:  # within the lease the worker goes on as it was
        assert not any(_fenced(w2, job) for job in running) and all(fed.bound_in(w2, job) for job in running)
        checks += 1
        time.sleep(0.5)
    assert checks, "the lease had run out before the stop command returned: nothing was checked within it"

    wait_for("d fenced past the lease", lambda: _fenced(w2, "d"), timeout=30)
    wait_for("running work fenced too", lambda: all(_fenced(w2, job) for job in running), timeout=30)
    wait_for("its pods stopped", lambda: not any(fed.bound_in(w2, job) for job in running), timeout=60)
    untainted = {"spec": {"taints": []}}
    w2.api.request("PATCH", f"/api/v1/nodes/{spare}", body=untainted, content_type=MERGE_PATCH)
    time.sleep(5)  # the worker's scheduler and operator run each second: d would be placed by now
    assert fed.bound_in(w2, "d") == [] and _fenced(w2, "d"), "d fits now but is never started here"
