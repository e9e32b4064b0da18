"""The operator process: informers for TrainingJobs, their pods and Checkpoints, and a reconcile loop.

Level-triggered: an informer event marks the job it concerns; each round reconciles the marked jobs
and those whose backoff ended, from the informers' copies. Pods and Services whose job is gone are
deleted here (a cluster without a garbage collector, such as a bare API server, would keep them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpufleet.kube.config import KubeConfig
from gpufleet.kube.informer import Informer, Informers, key_of
from gpufleet.kube.resources import POD, SERVICE, resource_for
from gpufleet.kube.training import JOB_LABEL, TrainingJobOperator
from gpufleet.kube.transport import ApiError, Json, Transport

log = logging.getLogger(__name__)


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
    ) -> None:
        self.api = transport
        self.config = config or KubeConfig()
        self.informers = informers or Informers(transport)
        self.jobs: Informer = self.informers.informer(resource_for("TrainingJob"))
        self.pods: Informer = self.informers.informer(POD, label_selector=JOB_LABEL)
        self.services: Informer = self.informers.informer(SERVICE, label_selector=JOB_LABEL)
        self.checkpoints: Informer = self.informers.informer(resource_for("Checkpoint"))
        self.training = TrainingJobOperator(transport, config=self.config)
        self.clock = clock
        self.period = period
        self.requeue: dict[str, float] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self.jobs.add_handler(lambda _e, old, new: self._mark(_job_of(new or old)))
        self.pods.add_handler(lambda _e, old, new: self._mark(_job_key(new or old)))
        self.services.add_handler(lambda _e, old, new: self._mark(_job_key(new or old)))
        self.checkpoints.add_handler(lambda _e, old, new: self._mark(_checkpoint_job(new or old)))

    def _mark(self, key: str | None) -> None:
        if key:
            with self._lock:
                self._dirty.add(key)
            self._changed.set()

    def run(self, lost: threading.Event) -> None:
        self.informers.wait_for_sync(None)
        with self._lock:
            self._dirty |= {key_of(j) for j in self.jobs.items()} | {
                _job_key(p) or "" for p in self.pods.items()
            }
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
        for key in sorted(k for k in keys if k):
            self.requeue.pop(key, None)
            self._reconcile(key, now)

    def _reconcile(self, key: str, now: float) -> None:
        namespace, _, name = key.partition("/")
        pods = [p for p in self.pods.items() if _job_key(p) == key]
        job = self.jobs.get(key)
        if job is None:
            self._collect(namespace, name, pods)
            return
        checkpoints = [c for c in self.checkpoints.items() if c["metadata"].get("namespace") == namespace]
        again = self.training.reconcile(job, pods, checkpoints, now=now)
        if again is not None:
            self.requeue[key] = again

    def _collect(self, namespace: str, name: str, pods: list[Json]) -> None:
        """The job is gone: so are its pods and Service."""
        targets = [
            POD.item(p["metadata"]["name"], namespace)
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
        ]
        if self.services.get(f"{namespace}/{name}") is not None:
            targets.append(SERVICE.item(name, namespace))
        for path in targets:
            try:
                self.api.request("DELETE", path)
            except ApiError as exc:
                if exc.status != 404:
                    raise


def _job_key(obj: Json | None) -> str | None:
    if obj is None:
        return None
    name = (obj["metadata"].get("labels") or {}).get(JOB_LABEL)
    return f"{obj['metadata'].get('namespace') or 'default'}/{name}" if name else None


def _checkpoint_job(obj: Json | None) -> str | None:
    if obj is None:
        return None
    job = (obj.get("spec") or {}).get("job")
    return f"{obj['metadata'].get('namespace') or 'default'}/{job}" if job else None


def _job_of(obj: Json | None) -> str | None:
    return key_of(obj) if obj is not None else None
