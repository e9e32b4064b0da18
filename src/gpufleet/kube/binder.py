"""Binding off the scheduling thread, as kube-scheduler's binding cycle runs beside its scheduling cycle.

The scheduling thread decides and assumes (the pod counts as bound in the cache at once); the writes
go out here, on a bounded pool of threads, so the next decisions never wait on the API server. One
request per pod: the Binding carries the pod's GPU choice and quota flavor as annotations, which the
API server merges into the pod as it sets `spec.nodeName`. A Normal `Scheduled` Event follows each
bind, as kube-scheduler writes one, through the one writer of `kube.event_writer`: the binding thread
does not wait for it.

What became of each bind is handed back to the scheduling thread (`drain`), which alone touches the
cache: a bind refused for good (pod gone, bound elsewhere) drops the assumption; one that failed for
a transient reason is tried again on the same node, so a gang is always completed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from gpufleet.api.errors import GpuFleetError
from gpufleet.fleet.state import Allocation
from gpufleet.kube import claim_writes
from gpufleet.kube.actions import Actions
from gpufleet.kube.claim_writes import ClaimWrite
from gpufleet.kube.event_writer import EventWriter
from gpufleet.kube.informer import key_of
from gpufleet.kube.transport import ApiError, Json
from gpufleet.observability import metrics

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 32
"""Binds in flight at once: enough to keep a local API server busy, few enough to leave it room.
0 binds on the calling thread (unit tests that step the scheduler pass by pass)."""


class BindResult(Enum):
    BOUND = "bound"
    REFUSED = "refused"
    """Gone, or bound elsewhere: what the pod now says decides."""
    RETRY = "retry"
    """The API server could not be reached or was failing: the same binding again later."""


@dataclass(frozen=True, slots=True)
class BindOutcome:
    key: str
    core_name: str
    node: str
    result: BindResult
    error: str = ""


@dataclass(frozen=True, slots=True)
class _Bind:
    pod: Json
    key: str
    core_name: str
    node: str
    alloc: Allocation | None
    annotations: dict[str, str]
    claims: tuple[ClaimWrite, ...] = ()


class Binder:
    """A bounded pool of binding writes whose outcomes the scheduling thread collects."""

    def __init__(
        self,
        actions: Actions,
        *,
        workers: int = DEFAULT_WORKERS,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self.actions = actions
        self.workers = workers
        # Plain threads over a queue rather than an executor: a Future per bind costs more CPU than the
        # bind's own bookkeeping, and nothing here waits on one.
        self._todo: queue.SimpleQueue[_Bind | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._done: queue.SimpleQueue[BindOutcome] = queue.SimpleQueue()
        self._on_done = on_done
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self.events = EventWriter()

    def submit(
        self,
        pod: Json,
        core_name: str,
        node: str,
        alloc: Allocation | None,
        annotations: Mapping[str, str] | None = None,
        claims: Sequence[ClaimWrite] = (),
    ) -> bool:
        """Starts binding `pod` to `node`; False if a bind of the same pod is still in flight. The pod's
        ResourceClaims (`claims`) are allocated and reserved for it first (`kube.claim_writes`)."""
        key = key_of(pod)
        with self._lock:
            if key in self._in_flight:
                return False
            self._in_flight.add(key)
        job = _Bind(pod, key, core_name, node, alloc, dict(annotations or {}), tuple(claims))
        if not self.workers:
            self._bind(job)
            return True
        if len(self._threads) < self.workers:  # started as binds come, up to the bound
            thread = threading.Thread(target=self._work, daemon=True, name=f"bind-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()
        self._todo.put(job)
        return True

    @property
    def busy(self) -> int:
        """Binds started and not yet finished."""
        with self._lock:
            return len(self._in_flight)

    def drain(self) -> list[BindOutcome]:
        """Every outcome finished since the last drain, in the order they finished."""
        out: list[BindOutcome] = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, *, wait: bool = True) -> None:
        """Stops the workers once the binds already handed over are done (`wait`: and waits for them)."""
        for _ in self._threads:
            self._todo.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
        self._threads = []
        self.events.close(wait=wait)  # after the binds, whose Events it writes

    def _work(self) -> None:
        while (job := self._todo.get()) is not None:
            self._bind(job)

    def _bind(self, job: _Bind) -> None:
        pod, key, node = job.pod, job.key, job.node
        result, error = BindResult.RETRY, ""
        try:
            started = time.perf_counter()
            # DRA: the claims' allocation and reservation are written before the Binding, so a kubelet
            # that sees the pod finds its devices allocated; a refused Binding lets them go again.
            claim_writes.reserve(self.actions.api, pod, job.claims)
            bound = self.actions.bind(pod, node, job.alloc, annotations=job.annotations)
            metrics.BIND_SECONDS.observe(time.perf_counter() - started)
            result = BindResult.BOUND if bound else BindResult.REFUSED
            if not bound and job.claims:
                claim_writes.unreserve(
                    self.actions.api,
                    pod["metadata"].get("uid", ""),
                    [(c.namespace, c.name) for c in job.claims],
                )
        except GpuFleetError as exc:  # a claim gone, or allocated otherwise: the pod is placed afresh
            result, error = BindResult.REFUSED, str(exc)
            log.warning("binding %s to %s refused: %s", key, node, exc, extra={"node": node})
        except ApiError as exc:
            error = str(exc)
        except Exception as exc:  # a bug in one bind must not lose the pod: it is retried
            log.exception("binding %s to %s failed", key, node, extra={"node": node})
            error = repr(exc)
        if result is BindResult.BOUND:
            if self.workers:
                about = _involved(pod)  # not the whole pod: thousands may wait behind a burst
                self.events.put(lambda: self.actions.scheduled(about, node))
            else:  # stepped on the caller's thread (tests): the Event at once, as the bind was
                self.actions.scheduled(pod, node)
        with self._lock:
            self._in_flight.discard(key)
        self._done.put(BindOutcome(key, job.core_name, node, result, error))
        if self._on_done is not None:
            self._on_done()


def _involved(pod: Json) -> Json:
    """What an Event needs of its pod (`Actions.event`'s involvedObject)."""
    meta = pod["metadata"]
    kept = ("name", "namespace", "uid", "resourceVersion")
    return {
        "apiVersion": pod.get("apiVersion", "v1"),
        "kind": pod.get("kind", "Pod"),
        "metadata": {key: meta[key] for key in kept if key in meta},
    }
