"""What the manager reads from each worker once a pass, and what it keeps in step there.

- `copies_in`: of one list of a worker's TrainingJobs and InferenceServices per pass (not one read per
  held object); the copies this manager made there, by (kind, namespace, name).
- `stale_copies`: the copies the manager no longer holds in that worker (the job was deleted in the
  manager, or it moved while the worker was out of reach). The manager deletes them, so deleting a job
  in the manager deletes its copy, also in a worker that was away when it happened.
- `queues_in_use` and `unused_queue`: a queue the manager made in a worker is deleted once nothing there
  names it any more: no job or service of the worker (the manager's finished copies included, until
  the job is deleted in the manager) and no grant of this pass. The worker's own work counts too, and
  its API refuses to delete a queue unfinished work names, so nothing there loses its queue.
- `EventMirror`: the worker's Events about the work it holds, copied into the manager under the
  object's name (so `gpufleet describe` on the manager tells what happened in the worker), each once,
  read from a cursor (only what the worker wrote since the last read).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Iterable, Mapping

from gpufleet.api.errors import ConflictError, GoneError, GpuFleetError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import Event
from gpufleet.federation.link import CLUSTER, MANAGED_BY, EventPage, Managed, WorkerClient
from gpufleet.store.protocol import Store

log = logging.getLogger(__name__)

Key = tuple[str, str, str]
"""(kind, namespace, name) of a job or service."""


def key_of(obj: Managed) -> Key:
    return (obj.kind, obj.namespace or "default", obj.name)


def copies_in(listed: Iterable[Managed], manager: str) -> dict[Key, Managed]:
    """Of a worker's jobs and services, the copies of this manager's work."""
    return {key_of(obj): obj for obj in listed if obj.metadata.annotations.get(MANAGED_BY) == manager}


def queues_in_use(listed: Iterable[Managed], copies: Mapping[Key, Managed], manager: str) -> set[str]:
    """The queues a worker's jobs and services name: its own work's, and the copies of this manager's
    still there (`copies`, without those deleted since the list)."""
    return {
        obj.spec.queue
        for obj in listed
        if obj.metadata.annotations.get(MANAGED_BY) != manager or key_of(obj) in copies
    }


def unused_queue(queue: Queue, manager: str, granted: Mapping[str, int], in_use: Collection[str]) -> bool:
    """Whether a worker's queue is one this manager made that nothing there needs any more."""
    mine = queue.metadata.annotations.get(MANAGED_BY) == manager
    return mine and not any(granted.values()) and queue.name not in in_use


def stale_copies(cluster: str, copies: Iterable[Key], jobs: Mapping[Key, Managed]) -> list[Key]:
    """The copies in `cluster` whose job the manager no longer has there."""
    return sorted(
        key
        for key in copies
        if (job := jobs.get(key)) is None or job.metadata.annotations.get(CLUSTER) != cluster
    )


class EventMirror:
    """Copies workers' Events about the jobs they hold into the manager, at most every `period_seconds`
    per worker. A copy is named `CLUSTER.EVENT`; its source and its message (`[w1] ...`, for
    `describe`, which shows no source) say the cluster. What was copied is remembered per held job, and
    forgotten once the job is no longer held there.

    Each worker is read from a cursor (`WorkerClient.read_events`): only what it wrote since the last
    read crosses the link, however long its event history. The first read, a read through another
    client (the worker joined again, perhaps with a fresh store) and a read after `GoneError` (the
    worker no longer keeps what came after the cursor) list everything once; what was copied already is
    recognised by name, so nothing is copied twice, and the cursor moves only once a page is copied,
    so nothing is lost. `fetch` only reads (it may run off the pass's thread); `copy` writes."""

    def __init__(self, store: Store, *, period_seconds: float = 5.0) -> None:
        self.store = store
        self.period_seconds = period_seconds
        self._next: dict[str, float] = {}
        self._copied: dict[tuple[str, Key], set[str]] = {}
        self._cursors: dict[str, tuple[WorkerClient, str]] = {}
        """Per cluster, the client read through and where its next read continues."""

    def fetch(self, cluster: str, client: WorkerClient, held: Iterable[Key], now: float) -> EventPage | None:
        """The worker's Events since the last copied page, when a read is due; None when not due or out
        of touch (the next period tries again)."""
        held = set(held)
        if not held or now < self._next.get(cluster, -1.0):
            return None
        self._next[cluster] = now + self.period_seconds
        namespaces = sorted({ns for _, ns, _ in held})
        known = self._cursors.get(cluster)
        since = known[1] if known is not None and known[0] is client else None
        try:
            try:
                return client.read_events(namespaces, since)
            except GoneError:
                log.info("cluster %s: its events after %s are gone; listing them again", cluster, since)
                return client.read_events(namespaces, None)
        except GpuFleetError as exc:
            log.info("cluster %s: cannot read its events: %s", cluster, exc)
            return None

    def copy(self, cluster: str, client: WorkerClient, held: Iterable[Key], page: EventPage | None) -> None:
        """Forgets what was copied for jobs no longer held there; copies the page's Events about held
        ones and moves the cursor past them."""
        held = set(held)
        for known in [k for k in self._copied if k[0] == cluster and k[1] not in held]:
            del self._copied[known]
        if page is None:
            return
        events, cursor = page
        for event in events:
            key = (event.spec.involved_kind, event.namespace or "default", event.spec.involved_name)
            if key in held:
                self._copy(cluster, key, event)
        if cursor is None:
            self._cursors.pop(cluster, None)
        else:
            self._cursors[cluster] = (client, cursor)

    def _copy(self, cluster: str, key: Key, event: Event) -> None:
        copied = self._copied.setdefault((cluster, key), set())
        if event.name in copied:
            return
        source = f"{cluster}/{event.spec.source}" if event.spec.source else cluster
        mirrored = Event(
            metadata=ObjectMeta(
                name=f"{cluster}.{event.name}"[:253], namespace=key[1], annotations={CLUSTER: cluster}
            ),
            spec=event.spec.model_copy(
                update={"source": source, "message": f"[{cluster}] {event.spec.message}"}
            ),
        )
        with contextlib.suppress(ConflictError):  # copied before this process started
            self.store.create(mirrored)
        copied.add(event.name)
