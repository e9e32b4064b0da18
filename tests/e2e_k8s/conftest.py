"""The e2e proof: against the cluster KUBECONFIG names (`make e2e`), a bare API server or a real one.

Without KUBECONFIG every test here is skipped, with that reason in pytest's summary. On a bare API
server (no controller manager, no kubelets) the suite plays the missing parts itself: it creates the
namespace's `default` ServiceAccount, creates Nodes with GPU capacity and topology labels, marks
them Ready and lifts the `node.kubernetes.io/not-ready` taint, and finishes pods that were asked to
stop (a graceful delete never completes without a kubelet). Everything it creates is named after
one run id, and its pods select only its own Nodes, so it can share a real cluster.

At the end it deletes what it made in its namespace (pods, Services, ConfigMaps, Events, Leases, the
ServiceAccount, gpufleet's namespaced custom resources) and the Events about its cluster-scoped
objects in `default`, then the namespace; a namespace still Terminating with no namespace controller
at work on it (a bare API server) is finalized, so nothing of the run is left.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from gpufleet.kube.transport import JSON, MERGE_PATCH, ApiError, Json, Transport

RUN = uuid.uuid4().hex[:6]
SKIP_REASON = "KUBECONFIG is not set: the k8s e2e suite needs a cluster (see README, Kubernetes)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.k8s)
            # The federation tests name their three clusters themselves (test_federation.py).
            if not os.environ.get("KUBECONFIG") and "federation" not in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


class Recorded:
    """A transport that notes the status of each request going through it (200 for an answer), so a
    test can tell what a component asked of the server and what it was refused."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.requests: list[tuple[str, str, int]] = []

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> Json:
        try:
            answer = self.inner.request(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
        except ApiError as exc:
            self.requests.append((method, path, exc.status))
            raise
        self.requests.append((method, path, 200))
        return answer

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        return self.inner.watch(path, query=query, timeout=timeout)

    def statuses(self, method: str, path: str) -> list[int]:
        """What the server answered each `method` on `path`, in order."""
        return [status for m, p, status in list(self.requests) if (m, p) == (method, path)]


class Cluster:
    """The test run's objects on the API server, and the node lifecycle a bare server lacks."""

    def __init__(self, api: Transport, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.nodes: list[str] = []
        self.queue = f"e2e-{RUN}"
        self.scheduler_name = f"gpufleet-e2e-{RUN}"
        self.selector = {"gpufleet.io/e2e-run": RUN}

    def node(self, name: str, *, gpus: int = 8, labels: dict[str, str] | None = None) -> str:
        full = f"e2e-{RUN}-{name}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": full,
                "labels": {
                    **self.selector,
                    "kubernetes.io/hostname": full,
                    "gpufleet.io/gpu-model": "H100-80GB",
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.count": str(gpus),
                    **(labels or {}),
                },
            },
        }
        self.api.request("POST", "/api/v1/nodes", body=body)
        self.nodes.append(full)
        resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "e2e plays the kubelet",
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(),
                    }
                ],
            }
        }
        self.api.request("PATCH", f"/api/v1/nodes/{full}/status", body=status, content_type=MERGE_PATCH)
        self.lift_not_ready(full)
        return full

    def lift_not_ready(self, node: str) -> None:
        """The node lifecycle controller's part: a Ready node loses the not-ready taint."""

        def lifted() -> bool:
            current = self.api.request("GET", f"/api/v1/nodes/{node}")
            taints = current.get("spec", {}).get("taints") or []
            keep = [t for t in taints if not t["key"].startswith("node.kubernetes.io/not-ready")]
            if len(keep) == len(taints):
                return True
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"taints": keep},
            }
            try:
                self.api.request("PATCH", f"/api/v1/nodes/{node}", body=patch, content_type=MERGE_PATCH)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            return False

        wait_for(f"node {node} without the not-ready taint", lifted, timeout=10)

    def pod(
        self,
        name: str,
        *,
        gpus: int = 8,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        node: str | None = None,
        affinity: Json | None = None,
    ) -> Json:
        """A pod of this run's queue asking for `gpus`; created bound to `node` when one is given, with
        `affinity` as its `spec.affinity` when one is given."""
        body: Json = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {"gpufleet.io/queue": self.queue, **(labels or {})},
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "schedulerName": self.scheduler_name,
                "nodeSelector": dict(self.selector),
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {
                            "limits": {"nvidia.com/gpu": str(gpus)},
                            "requests": {"cpu": "1", "memory": "1Gi"},
                        },
                    }
                ],
            },
        }
        if node is not None:
            body["spec"]["nodeName"] = node
        if affinity is not None:
            body["spec"]["affinity"] = affinity
        return self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body=body)

    def gang(self, name: str, size: int, *, gpus: int = 8, **extra: Any) -> list[str]:
        labels = {"gpufleet.io/gang": name, "gpufleet.io/gang-size": str(size), **extra.pop("labels", {})}
        return [
            self.pod(f"{name}-{i}", gpus=gpus, labels=labels, **extra)["metadata"]["name"]
            for i in range(size)
        ]

    def get_pod(self, name: str) -> Json:
        return self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{name}")

    def node_of(self, name: str) -> str | None:
        """The pod's node; None while it is unbound or not created yet (the operator makes it)."""
        try:
            return self.get_pod(name).get("spec", {}).get("nodeName") or None
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def condition(self, name: str, kind: str) -> Json | None:
        conditions = self.get_pod(name).get("status", {}).get("conditions") or []
        return next((c for c in conditions if c.get("type") == kind), None)

    def events(self, reason: str) -> list[Json]:
        items = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/events").get("items", [])
        return [e for e in items if e.get("reason") == reason]

    def finish_deleting(self) -> None:
        """The kubelet's part: pods asked to stop are gone once their containers would have stopped."""
        items = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods").get("items", [])
        for pod in items:
            if pod["metadata"].get("deletionTimestamp"):
                self.delete_pod(pod["metadata"]["name"])

    def delete_pod(self, name: str) -> None:
        try:
            self.api.request(
                "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}", body={"gracePeriodSeconds": 0}
            )
        except ApiError as exc:
            if exc.status != 404:
                raise

    def clear_pods(self) -> None:
        items = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods").get("items", [])
        for pod in items:
            self.delete_pod(pod["metadata"]["name"])
        wait_for(
            "pods gone",
            lambda: not self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")["items"],
        )

    def clear_nodes(self) -> None:
        for node in self.nodes:
            try:
                self.api.request("DELETE", f"/api/v1/nodes/{node}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.nodes.clear()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


CORE_NAMESPACED = ("pods", "services", "endpoints", "configmaps", "events", "serviceaccounts")
"""What the suite and the gpufleet components it runs make in the run's namespace, beside the Leases
and gpufleet's custom resources."""


def namespaced_collections(namespace: str) -> list[str]:
    """The collections in `namespace` the run may have put objects in."""
    from gpufleet.api.crd import custom_resource_definitions

    paths = [f"/api/v1/namespaces/{namespace}/{plural}" for plural in CORE_NAMESPACED]
    paths.append(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
    for crd in custom_resource_definitions():
        spec = crd["spec"]
        if spec.get("scope") == "Namespaced":
            version = next(v["name"] for v in spec["versions"] if v.get("served"))
            paths.append(f"/apis/{spec['group']}/{version}/namespaces/{namespace}/{spec['names']['plural']}")
    return paths


def _items(api: Transport, path: str) -> list[Json]:
    """The collection's objects; none where the server has no such collection (a CRD not installed)."""
    try:
        items: list[Json] = api.request("GET", path).get("items") or []
    except ApiError as exc:
        if exc.status == 404:
            return []
        raise
    return items


def _delete(api: Transport, path: str, body: Json | None = None) -> None:
    try:
        api.request("DELETE", path, body=body)
    except ApiError as exc:
        if exc.status != 404:
            raise


def delete_namespace_content(api: Transport, namespace: str) -> None:
    """Deletes every object of the run's collections in `namespace` (pods at once: no kubelet may
    finish them)."""
    now = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
    for path in namespaced_collections(namespace):
        for item in _items(api, path):
            _delete(api, f"{path}/{item['metadata']['name']}", now)


def namespace_content(api: Transport, namespace: str) -> list[str]:
    """`plural/name` of the objects in the run's collections of `namespace` (the API server answers
    for a namespace that is gone too: what it still stores there)."""
    return [
        f"{path.rsplit('/', 1)[1]}/{item['metadata']['name']}"
        for path in namespaced_collections(namespace)
        for item in _items(api, path)
    ]


def delete_run_events(api: Transport, run: str = RUN) -> None:
    """Events in `default` about the run's cluster-scoped objects (Nodes, Queues, GPUPools, all named
    with the run id): the API server keeps them there, and nothing else removes them."""
    path = "/api/v1/namespaces/default/events"
    for event in _items(api, path):
        involved = event.get("involvedObject") or {}
        if run in (involved.get("name") or "") and not involved.get("namespace"):
            _delete(api, f"{path}/{event['metadata']['name']}")


ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
"""What the controller manager's root-CA publisher puts in every namespace: a sign that one runs."""
CONTROLLER_MANAGER_LEASE = (
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"
)
"""The controller manager's leader-election Lease (on by default): the other sign that one runs."""


def controller_manager_runs(api: Transport, namespace: str) -> bool:
    """Whether a controller manager (and so a namespace controller) serves this cluster."""
    return (
        _get(api, f"/api/v1/namespaces/{namespace}/configmaps/{ROOT_CA_CONFIG_MAP}") is not None
        or _get(api, CONTROLLER_MANAGER_LEASE) is not None
    )


def remove_namespace(api: Transport, namespace: str, *, timeout: float = 60.0) -> list[str]:
    """Deletes the run's namespace after its content; returns what is left after at most `timeout`
    seconds (empty: nothing).

    Where a controller manager runs, its namespace controller finishes the deletion, however long its
    pass over every resource type takes: the namespace is never finalized here, since that would leave
    whatever the controller has not deleted yet orphaned in storage. On a bare API server (neither the
    controller manager's `kube-root-ca.crt` in the namespace nor its Lease) the namespace stays
    Terminating for good, so it is finalized at once: its content is gone already."""
    bare = not controller_manager_runs(api, namespace)
    delete_namespace_content(api, namespace)
    path = f"/api/v1/namespaces/{namespace}"
    _delete(api, path)
    start, finalized = time.monotonic(), False
    while (found := _get(api, path)) is not None:
        if bare and not finalized:
            body = {**found, "spec": {**(found.get("spec") or {}), "finalizers": []}}
            api.request("PUT", f"{path}/finalize", body=body)
            finalized = True  # once: a namespace with finalizers of its own waits for them
            continue
        if time.monotonic() - start >= timeout:
            phase = (found.get("status") or {}).get("phase")
            return [f"namespace {namespace} ({phase})", *namespace_content(api, namespace)]
        time.sleep(0.5)
    return namespace_content(api, namespace)


def _get(api: Transport, path: str) -> Json | None:
    try:
        found: Json = api.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


@pytest.fixture(scope="session")
def api() -> Transport:
    from gpufleet.kube.client import KubeTransport

    return KubeTransport.from_environment(kubeconfig=os.environ["KUBECONFIG"])


@contextlib.contextmanager
def run_namespace(api: Transport, name: str, *, run: str = RUN) -> Iterator[str]:
    """The run's namespace, with the `default` ServiceAccount pods need (no controller may make it);
    on the way out everything the run left in it, its Events in `default` and the namespace go."""
    api.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    try:  # pods are refused until the namespace has a default ServiceAccount (no controller makes it)
        api.request(
            "POST",
            f"/api/v1/namespaces/{name}/serviceaccounts",
            body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
    except ApiError as exc:
        if exc.status != 409:
            raise
    try:
        yield name
    finally:
        delete_run_events(api, run)
        left = remove_namespace(api, name)
        if left:
            warnings.warn(f"the e2e run {run} left {', '.join(left)}", stacklevel=1)


@pytest.fixture(scope="session")
def namespace(api: Transport) -> Iterator[str]:
    with run_namespace(api, f"gpufleet-e2e-{RUN}") as name:
        yield name


@pytest.fixture(scope="session")
def crds(api: Transport) -> None:
    from gpufleet.kube.crds import install_crds

    install_crds(api)


@pytest.fixture(scope="session")
def queue(api: Transport, crds: None) -> Iterator[str]:
    name = f"e2e-{RUN}"
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"quotas": {"H100-80GB": {"nominal": 1000}}},
    }
    api.request("POST", "/apis/gpufleet.io/v1alpha1/queues", body=body)
    yield name
    with contextlib.suppress(ApiError):
        api.request("DELETE", f"/apis/gpufleet.io/v1alpha1/queues/{name}")


@pytest.fixture
def cluster(api: Transport, namespace: str, queue: str) -> Iterator[Cluster]:
    made = Cluster(api, namespace)
    yield made
    made.clear_pods()
    made.clear_nodes()


@pytest.fixture
def scheduler(api: Transport, cluster: Cluster) -> Iterator[Any]:
    """gpufleet's scheduler in this process, for this run's scheduler name (no leader election)."""
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.scheduler import KubeScheduler

    config = KubeConfig(scheduler_name=cluster.scheduler_name, eviction_grace_seconds=5)
    sched = KubeScheduler(api, config=config, identity=f"e2e-{RUN}", period=1.0)
    stop = threading.Event()
    sched.informers.start(stop)
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    thread.start()
    yield sched
    stop.set()
    thread.join(10)
