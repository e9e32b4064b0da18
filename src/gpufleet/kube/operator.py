"""The operator process: informers for what it reconciles, and one level-triggered reconcile loop.

It reconciles TrainingJobs (`kube.training`), InferenceServices (`kube.inference`), and Nodes and
GPUPools (`kube.fleet`: pool labels, taints and sharing, spot drain, GPU health). An informer event
marks the object it concerns as `(kind, namespace/name)`; each round reconciles the marked objects
and those whose requeue time came (a backoff, the next metrics sample), from the informers' copies.
A job's or service's Service is created only when the informers hold none: every rejected POST of a
ClusterIP Service still makes a real API server allocate an IP and release it again.
Pods and Services whose owner is gone are deleted here (a cluster without a garbage collector, such
as a bare API server, would keep them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpufleet.api.labels import JOB_LABEL, SERVICE_LABEL
from gpufleet.controllers import jobstate
from gpufleet.controllers.failures import contained
from gpufleet.kube import poolidle
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.fleet import FleetOperator
from gpufleet.kube.inference import InferenceServiceOperator
from gpufleet.kube.informer import Informer, Informers, key_of
from gpufleet.kube.metrics import MetricSource
from gpufleet.kube.resources import NODE, POD, SERVICE, resource_for
from gpufleet.kube.training import TrainingJobOperator
from gpufleet.kube.transport import ApiError, Json, Transport

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(kind, `namespace/name` or `name` for cluster-scoped kinds)."""

TRAINING, INFERENCE, NODE_KIND, POOL = "TrainingJob", "InferenceService", "Node", "GPUPool"
SHARING = "GPUPoolSharing"
IDLE, ALL = "GPUPoolIdle", "*"
"""Every pool's idle GPU-hours, brought up to date in one pass (`kube.poolidle`)."""
"""A pool's sharing ConfigMap alone: its entries no node picks any more are dropped after the nodes."""
SHARING_RETRY_SECONDS = 5.0
"""When a pool's sharing ConfigMap is looked at again while nodes not yet relabelled pick old entries."""
REFUSED_RETRY_SECONDS = 30.0
"""When an object the API server refused a write for (or whose reconcile failed) is looked at again."""


class Operator:
    """Runs reconcile rounds while this replica leads."""

    def __init__(
        self,
        transport: Transport,
        *,
        config: KubeConfig | None = None,
        informers: Informers | None = None,
        clock: Callable[[], float] = time.time,
        period: float = 10.0,
        metrics: MetricSource | None = None,
        sample_seconds: float = 15.0,
        nodes: bool = True,
        node_selector: str | None = None,
    ) -> None:
        self.api = transport
        self.config = config or KubeConfig()
        self.informers = informers or Informers(transport)
        inf = self.informers
        self.jobs: Informer = inf.informer(resource_for(TRAINING))
        self.pods: Informer = inf.informer(POD, label_selector=JOB_LABEL)
        self.services: Informer = inf.informer(SERVICE, label_selector=JOB_LABEL)
        self.checkpoints: Informer = inf.informer(resource_for("Checkpoint"))
        self.inference: Informer = inf.informer(resource_for(INFERENCE))
        self.replicas: Informer = inf.informer(POD, label_selector=SERVICE_LABEL)
        self.frontends: Informer = inf.informer(SERVICE, label_selector=SERVICE_LABEL)
        self.versions: Informer = inf.informer(resource_for("ModelVersion"))
        self.loads: Informer = inf.informer(resource_for("ServiceLoad"))
        self.training = TrainingJobOperator(transport, config=self.config)
        self.serving = InferenceServiceOperator(
            transport, config=self.config, source=metrics, sample_seconds=sample_seconds
        )
        self.fleet: FleetOperator | None = None
        if nodes:
            self.nodes: Informer = inf.informer(NODE, label_selector=node_selector)
            self.pools: Informer = inf.informer(resource_for(POOL))
            self.fleet = FleetOperator(transport, namespace=self.config.namespace)
            # Every bound pod, for the pools' idle GPUs (`kube.poolidle`); unbound ones hold nothing.
            self.bound: Informer = inf.informer(POD, field_selector="spec.nodeName!=")
        self.clock = clock
        self.period = period
        self.requeue: dict[Key, float] = {}
        self._dirty: set[Key] = set()
        self._after_nodes: set[Key] = set()
        """Pools whose sharing ConfigMap kept entries this round: looked at again after its nodes."""
        self._swept = 0
        self._idle_written: dict[str, tuple[str, Json]] = {}
        """The pools' idle fields this replica last wrote, by the version they were written on."""
        """The pools informer's list (`relists`) the sharing ConfigMaps were last compared with."""
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._watch()

    def _watch(self) -> None:
        def on(informer: Informer, kind: str, key: Callable[[Json], str | None]) -> None:
            def handle(_event: str, old: Json | None, new: Json | None) -> None:
                obj = new if new is not None else old
                if obj is not None:
                    self.mark(kind, key(obj))

            informer.add_handler(handle)

        on(self.jobs, TRAINING, key_of)
        on(self.pods, TRAINING, lambda o: _labelled(o, JOB_LABEL))
        on(self.services, TRAINING, lambda o: _labelled(o, JOB_LABEL))
        on(self.checkpoints, TRAINING, _checkpoint_job)
        on(self.inference, INFERENCE, key_of)
        on(self.replicas, INFERENCE, lambda o: _labelled(o, SERVICE_LABEL))
        on(self.frontends, INFERENCE, lambda o: _labelled(o, SERVICE_LABEL))
        on(self.loads, INFERENCE, key_of)
        self.versions.add_handler(lambda _e, old, new: self._version_changed(new or old or {}))
        if self.fleet is not None:
            on(self.nodes, NODE_KIND, key_of)
            # A pool's change concerns the pool and every node it may select (or no longer select).
            self.pools.add_handler(lambda _e, old, new: self._pool_changed(old, new))
            for informer in (self.nodes, self.bound):
                informer.add_handler(lambda _e, _old, _new: self.mark(IDLE, ALL))

    def mark(self, kind: str, key: str | None) -> None:
        if key:
            with self._lock:
                self._dirty.add((kind, key))
            self._changed.set()

    def _version_changed(self, version: Json) -> None:
        if not version:
            return
        namespace = version["metadata"].get("namespace") or "default"
        for service in self.inference.items():
            spec = service.get("spec") or {}
            if (
                service["metadata"].get("namespace") == namespace
                and spec.get("modelVersion") == key_of(version).partition("/")[2]
            ):
                self.mark(INFERENCE, key_of(service))

    def _pool_changed(self, old: Json | None, new: Json | None) -> None:
        pool = new or old
        if not pool:
            return
        self.mark(IDLE, ALL)
        if old is not None and new is not None and old.get("spec") == new.get("spec"):
            return  # its status alone (written here): nothing of the nodes depends on it
        self.mark(POOL, key_of(pool))
        for node in self.nodes.items():
            self.mark(NODE_KIND, key_of(node))

    def run(self, lost: threading.Event) -> None:
        self.informers.wait_for_sync(None)
        for informer, kind in ((self.jobs, TRAINING), (self.inference, INFERENCE)):
            for obj in informer.items():
                self.mark(kind, key_of(obj))
        for pod in self.pods.items():
            self.mark(TRAINING, _labelled(pod, JOB_LABEL))
        for pod in self.replicas.items():
            self.mark(INFERENCE, _labelled(pod, SERVICE_LABEL))
        if self.fleet is not None:
            for node in self.nodes.items():
                self.mark(NODE_KIND, key_of(node))
            for pool in self.pools.items():
                self.mark(POOL, key_of(pool))
            self.mark(IDLE, ALL)
        while not lost.is_set():
            self._changed.clear()
            try:
                self.reconcile_once()
            except Exception:  # a round that fails is retried; the loop must live
                log.exception("operator round failed")
            self._changed.wait(self._wait())
            lost.wait(0.2)

    def _wait(self) -> float:
        soonest = min(self.requeue.values(), default=None)
        return self.period if soonest is None else max(0.0, min(self.period, soonest - self.clock()))

    def reconcile_once(self) -> None:
        now = self.clock()
        with self._lock:
            keys, self._dirty = self._dirty, set()
        keys |= {k for k, at in self.requeue.items() if at <= now}
        keys |= self._gone_pools()
        # Pools before nodes: a node's labels pick entries of the sharing ConfigMap the pool's
        # reconcile just wrote; the entries they picked before are dropped after the nodes.
        order = {POOL: 0, NODE_KIND: 1, SHARING: 3, IDLE: 4}
        self._after_nodes.clear()
        for kind, key in sorted(keys, key=lambda k: (order.get(k[0], 2), k)):
            self._attempt(kind, key, now)
        for kind, key in sorted(self._after_nodes - keys):
            self._attempt(kind, key, now)

    def _gone_pools(self) -> set[Key]:
        """Once the pools are listed, and again after each full list: the pools gone whose sharing
        ConfigMap is still there, to be forgotten like a pool seen going. That a deleted pool's
        ConfigMap is still to be removed lives only in this process (`requeue`), so an operator that
        stopped mid-handover, or was not running when the pool was deleted, would leave it for good."""
        if self.fleet is None or not self.pools.synced or self.pools.relists == self._swept:
            return set()
        relists = self.pools.relists
        try:
            gone = self.fleet.gone_pools({key_of(p) for p in self.pools.items()})
        except ApiError as exc:
            if exc.retryable:
                log.info("sharing ConfigMaps of deleted pools not looked for: %s; trying again", exc)
                return set()  # the next round looks again
            # e.g. RBAC without `list` on ConfigMaps: say so; the next full list of the pools tries again
            log.warning("sharing ConfigMaps of deleted pools not looked for: %s", exc)
            gone = []
        self._swept = relists
        if gone:
            log.info("GPUPools %s are gone but their sharing ConfigMaps are not: removing them", gone)
        return {(POOL, name) for name in gone}

    def _attempt(self, kind: str, key: str, now: float) -> None:
        """Reconciles one object; when it fails, it is tried again later and the round goes on."""
        self.requeue.pop((kind, key), None)
        try:
            again = self._reconcile(kind, key, now)
        except ApiError as exc:
            if exc.retryable or exc.status == 409:
                log.info("%s %s: %s; trying again", kind, key, exc)
                again = now + 1.0
            else:  # refused (422, 403...): say so, and let the rest of the round go on
                log.warning("%s %s: %s; trying again in %gs", kind, key, exc, REFUSED_RETRY_SECONDS)
                again = now + REFUSED_RETRY_SECONDS
        except Exception:  # one object's bug must not starve the others
            retry = REFUSED_RETRY_SECONDS
            contained("operator", "%s %s: reconcile failed; trying again in %gs", kind, key, retry)
            again = now + retry
        if again is not None:
            self.requeue[(kind, key)] = again

    def _reconcile(self, kind: str, key: str, now: float) -> float | None:
        if kind == TRAINING:
            return self._training(key, now)
        if kind == INFERENCE:
            return self._serving(key, now)
        if self.fleet is None:
            return None
        if kind == POOL:
            pool = self.pools.get(key)
            if pool is not None:
                settled = self.fleet.reconcile_pool(pool, self.nodes.items(), self.pools.items())
            else:
                settled = self.fleet.forget_pool(key)
            if not settled:
                self._after_nodes.add((SHARING, key))
            return None
        if kind == IDLE:
            pools, nodes, pods = self.pools.items(), self.nodes.items(), self.bound.items()
            moving = poolidle.account_pools(
                self.api, pools, nodes, pods, self.config, now=now, written=self._idle_written
            )
            return now + poolidle.IDLE_PERIOD if moving else None
        if kind == SHARING:
            settled = self.fleet.sync_sharing(key, self.pools.get(key))
            return None if settled else now + SHARING_RETRY_SECONDS
        node = self.nodes.get(key)
        if node is None:
            return None
        return self.fleet.reconcile_node(node, self.pools.items(), now=now)

    def _training(self, key: str, now: float) -> float | None:
        namespace, _, name = key.partition("/")
        pods = [p for p in self.pods.items() if _labelled(p, JOB_LABEL) == key]
        job = self.jobs.get(key)
        if job is None:
            self._collect(namespace, name, pods, self.services)
            jobstate.forget_metrics(namespace, name)
            return None
        checkpoints = [c for c in self.checkpoints.items() if c["metadata"].get("namespace") == namespace]
        node = self.nodes.get if self.fleet is not None else None
        return self.training.reconcile(
            job, pods, checkpoints, service=self.services.get(key), now=now, node=node
        )

    def _serving(self, key: str, now: float) -> float | None:
        namespace, _, name = key.partition("/")
        pods = [p for p in self.replicas.items() if _labelled(p, SERVICE_LABEL) == key]
        service = self.inference.get(key)
        if service is None:
            self.serving.forget(key)
            self._collect(namespace, name, pods, self.frontends)
            return None
        versions = {
            v["metadata"]["name"]: v
            for v in self.versions.items()
            if v["metadata"].get("namespace") == namespace
        }
        load, frontend = self.loads.get(key), self.frontends.get(key)
        return self.serving.reconcile(service, pods, versions, load, frontend=frontend, now=now)

    def _collect(self, namespace: str, name: str, pods: list[Json], services: Informer) -> None:
        """The owner is gone: so are its pods and Service."""
        targets = [
            POD.item(p["metadata"]["name"], namespace)
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
        ]
        if services.get(f"{namespace}/{name}") is not None:
            targets.append(SERVICE.item(name, namespace))
        for path in targets:
            try:
                self.api.request("DELETE", path)
            except ApiError as exc:
                if exc.status != 404:
                    raise


def _labelled(obj: Json | None, label: str) -> str | None:
    """`namespace/value` of an object's `label`, the key of the object that owns it."""
    if obj is None:
        return None
    name = (obj["metadata"].get("labels") or {}).get(label)
    return f"{obj['metadata'].get('namespace') or 'default'}/{name}" if name else None


def _checkpoint_job(obj: Json | None) -> str | None:
    if obj is None:
        return None
    job = (obj.get("spec") or {}).get("job")
    return f"{obj['metadata'].get('namespace') or 'default'}/{job}" if job else None
