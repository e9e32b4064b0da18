"""The federation's RBAC is what its code calls: every request the manager and the workers make in the
federation's flows (in-memory API servers, tests/kube/test_federation_kube.py's `Federation`) is
granted by the rendered roles to the identity that makes it, and every verb a role grants is used."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.inference import InferenceService
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.status import CheckpointRef
from gpufleet.api.training import TrainingJob
from gpufleet.api.validation import parse_object
from gpufleet.cli.kube_federation import ManagerLoop, WorkerLoop
from gpufleet.federation.link import CLUSTER
from gpufleet.kube.leader import LeaderElector, LeaseConfig
from gpufleet.kube.manifests import render_all, values_from
from gpufleet.kube.store import KubeStore
from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.kube.worker_cache import CopyCache

from .fakeapi import FakeApiServer
from .test_federation_kube import GRACE, LEASE, Federation, fleet, job

SYSTEM = "gpufleet-system"
MANAGER_SA = (SYSTEM, "gpufleet-manager")
ACCESS_SA = (SYSTEM, "gpufleet-federation-manager")
SCHEDULER_SA = (SYSTEM, "gpufleet-scheduler")


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    """With its subresource: `clusters/status`."""
    namespace: str | None
    name: str | None


def request_of(method: str, path: str, query: Mapping[str, Any]) -> Request:
    """What RBAC sees of a request: the verb and the resource it names."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    name = rest[1] if len(rest) > 1 else None
    resource = "/".join([rest[0], *rest[2:3]])
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    verb = verbs.get(method) or ("watch" if query.get("watch") else "get" if name else "list")
    return Request(verb, group, resource, namespace, name)


class Recorder:
    """A transport that notes every request before passing it on; it may refuse chosen ones first."""

    def __init__(self, inner: Transport, who: tuple[str, str], log: list[tuple[tuple[str, str], Request]]):
        self.inner, self.who, self.log = inner, who, log
        self.conflicts: set[tuple[str, str]] = set()
        """(verb, resource) answered once with a 409, as when another writer won the race."""

    def request(self, method: str, path: str, **kwargs: Any) -> Json:
        seen = request_of(method, path, kwargs.get("query") or {})
        self.log.append((self.who, seen))
        if (seen.verb, seen.resource) in self.conflicts:
            self.conflicts.discard((seen.verb, seen.resource))
            raise ApiError(409, "Conflict", "the object has been modified")
        return self.inner.request(method, path, **kwargs)

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        self.log.append((self.who, request_of("GET", path, {**query, "watch": True})))
        return self.inner.watch(path, query=query, timeout=timeout)


def allowed(objects: list[Json], account: tuple[str, str], req: Request) -> bool:
    """RBAC's answer for a ServiceAccount over the rendered objects (bindings, roles, resourceNames)."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    subject = {"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}
    for bound in objects:
        if bound["kind"] not in ("RoleBinding", "ClusterRoleBinding") or subject not in bound["subjects"]:
            continue
        where = bound["metadata"].get("namespace")
        if bound["kind"] == "RoleBinding" and where != req.namespace:
            continue
        ref = bound["roleRef"]
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            names = rule.get("resourceNames")
            if (
                req.group in rule["apiGroups"]
                and req.resource in rule["resources"]
                and req.verb in rule["verbs"]
                and (not names or req.name in names)
            ):
                return True
    return False


def granted(objects: list[Json], names: set[str]) -> set[tuple[str, str, str, str]]:
    """(role, group, resource, verb) of every rule of the named roles."""
    return {
        (o["metadata"]["name"], group, res, verb)
        for o in objects
        if o["kind"] in ("Role", "ClusterRole") and o["metadata"]["name"] in names
        for rule in o["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }


MANAGER_CLUSTER = render_all(
    values_from(
        {
            "installCRDs": False,
            "scheduler": {"enabled": False},
            "agent": {"enabled": False},
            "federation": {
                "manager": {
                    "enabled": True,
                    "workers": ["w1", "w2"],
                    "kubeconfigSecrets": ["w1-kubeconfig", "w2-kubeconfig"],
                }
            },
        }
    )
)
WORKER_CLUSTER = render_all(
    values_from({"installCRDs": False, "federation": {"worker": {"clusterName": "w1"}}})
)


def service() -> InferenceService:
    obj = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team"},
            "spec": {"queue": "fleet", "replicas": {"min": 1, "max": 1}, "replica": {"gpus": 1}},
        }
    )
    assert isinstance(obj, InferenceService)
    return obj


@pytest.fixture(scope="module")
def requests() -> list[tuple[tuple[str, str], Request]]:
    return federation_requests()


def federation_requests() -> list[tuple[tuple[str, str], Request]]:
    """Each identity's requests through the federation's flows: a job and a service dispatched, the job
    running and checkpointed, its worker silent (fenced there, moved with its checkpoint to the other,
    which holds a Checkpoint of that name already), a conditions write that loses a race, deletes."""
    log: list[tuple[tuple[str, str], Request]] = []
    fed = Federation()
    at_manager = Recorder(fed.manager, MANAGER_SA, log)
    at_manager.conflicts.add(("patch", "clusters/status"))

    def reach(config: dict[str, Any]) -> Transport:
        return Recorder(fed._reach(config), ACCESS_SA, log)

    fed.loop = ManagerLoop(at_manager, grace_seconds=GRACE, connect_transport=reach, clock=lambda: fed.now)
    fed.agents = {
        name: WorkerLoop(
            Recorder(api, SCHEDULER_SA, log),
            Recorder(fed.manager, (SYSTEM, f"gpufleet-worker-{name}"), log),
            name,
            lambda: fleet(2),
            clock=lambda: fed.now,
        )
        for name, api in fed.workers.items()
    }
    elector = LeaderElector(at_manager, LeaseConfig("gpufleet-manager", SYSTEM, "manager-0"))
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()

    fed.store.create(job("train"))
    fed.store.create(service())
    fed.run(3)
    assert fed.held("train").metadata.annotations[CLUSTER] == "w1"
    worker = KubeStore(fed.workers["w1"])
    copy = worker.get(TrainingJob, "train", "team")
    copy.status.phase = "Running"
    copy.status.last_checkpoint = CheckpointRef(
        name="train-100", step=100, time=datetime(2030, 1, 1, tzinfo=UTC), uri="s3://ckpt/train"
    )
    worker.update_status(copy)
    fed.workers["w2"].request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    KubeStore(fed.workers["w2"]).create(
        Checkpoint(
            metadata=ObjectMeta(name="train-100", namespace="team"),
            spec=CheckpointSpec(job="train", step=90, uri="s3://ckpt/train"),
        )
    )
    fed.run(6)
    fed.silent.add("w1")
    fed.run(LEASE + GRACE + 4)
    assert fed.held("train").metadata.annotations[CLUSTER] == "w2"
    fed.silent.clear()
    fed.store.delete(InferenceService, "chat", "team")
    fed.store.delete(TrainingJob, "train", "team")
    fed.run(3)
    # What `gpufleet kube manager` does beside the lists above: it watches each worker's copies.
    cache = CopyCache(Recorder(fed.workers["w2"], ACCESS_SA, log), watch_seconds=1)
    cache.start()
    deadline = time.monotonic() + 10
    watched = {"trainingjobs", "inferenceservices", "events"}  # the copies and their Events

    def watching() -> set[str]:
        return {r.resource for who, r in log if who == ACCESS_SA and r.verb == "watch"}

    while cache.managed() is None or not cache.events.synced or watching() < watched:
        assert time.monotonic() < deadline, "the watched copies did not sync"
        time.sleep(0.02)
    cache.close()
    return log


@pytest.mark.parametrize(
    ("objects", "accounts"),
    [
        (MANAGER_CLUSTER, {MANAGER_SA, (SYSTEM, "gpufleet-worker-w1"), (SYSTEM, "gpufleet-worker-w2")}),
        (WORKER_CLUSTER, {ACCESS_SA, SCHEDULER_SA}),
    ],
    ids=["manager-cluster", "worker-cluster"],
)
def test_every_request_of_the_federation_is_granted_to_who_makes_it(
    requests: list[tuple[tuple[str, str], Request]], objects: list[Json], accounts: set[tuple[str, str]]
) -> None:
    made = {(who, req) for who, req in requests if who in accounts}
    assert {who for who, _ in made} == accounts
    refused = sorted(f"{who[1]}: {req}" for who, req in made if not allowed(objects, who, req))
    assert not refused


def test_a_worker_may_read_and_report_only_its_own_cluster() -> None:
    w1 = (SYSTEM, "gpufleet-worker-w1")
    own = Request("patch", "gpufleet.io", "clusters/status", None, "w1")
    assert allowed(MANAGER_CLUSTER, w1, own)
    assert not allowed(MANAGER_CLUSTER, w1, Request("patch", "gpufleet.io", "clusters/status", None, "w2"))
    assert not allowed(MANAGER_CLUSTER, w1, Request("get", "gpufleet.io", "clusters", None, "w2"))
    assert not allowed(MANAGER_CLUSTER, w1, Request("list", "gpufleet.io", "clusters", None, None))
    secret = Request("get", "", "secrets", SYSTEM, "w1-kubeconfig")
    assert allowed(MANAGER_CLUSTER, MANAGER_SA, secret)
    assert not allowed(MANAGER_CLUSTER, MANAGER_SA, Request("get", "", "secrets", SYSTEM, "other"))
    assert not allowed(MANAGER_CLUSTER, MANAGER_SA, Request("list", "", "secrets", SYSTEM, None))


def test_every_federation_grant_is_used_by_the_code(requests: list[tuple[tuple[str, str], Request]]) -> None:
    roles = {
        "gpufleet-manager": MANAGER_SA,
        "gpufleet-manager-secrets": MANAGER_SA,
        "gpufleet-manager-leader-election": MANAGER_SA,
        "gpufleet-worker-w1": (SYSTEM, "gpufleet-worker-w1"),
        "gpufleet-federation-manager": ACCESS_SA,
        "gpufleet-scheduler-federation": SCHEDULER_SA,
    }
    used = {(who, req.group, req.resource, req.verb) for who, req in requests}
    grants = granted(MANAGER_CLUSTER, set(roles)) | granted(WORKER_CLUSTER, set(roles))
    unused = sorted(g for g in grants if (roles[g[0]], *g[1:]) not in used)
    assert not unused


def test_the_recorder_sees_rbac_as_the_api_server_does() -> None:
    api = FakeApiServer()
    log: list[tuple[tuple[str, str], Request]] = []
    Recorder(api, MANAGER_SA, log).request("POST", "/api/v1/namespaces", body={"metadata": {"name": "x"}})
    assert log[0][1] == Request("create", "", "namespaces", None, None)
    assert request_of("GET", "/apis/gpufleet.io/v1alpha1/namespaces/t/trainingjobs", {}).verb == "list"
    status = request_of("PATCH", "/apis/gpufleet.io/v1alpha1/clusters/w1/status", {})
    assert status == Request("patch", "gpufleet.io", "clusters/status", None, "w1")
