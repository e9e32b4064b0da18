"""The manager's watched feed of a Kubernetes worker's Events about gpufleet work.

The manager copies the Events a worker writes about the work it holds into the manager cluster
(`federation.sync.EventMirror`). Listing them every period sent the worker's whole event history each
time. `EventFeed` follows them instead, with an informer per kind of work: core/v1 Events whose
`involvedObject.kind` is TrainingJob or InferenceService (a field selector, so none of the worker's pod
and node Events cross the network), one list and then a watch from its resourceVersion. A watch the
server has compacted away (410 Gone) lists again, and the informer tells only what that list changed.

Each Event the informers add or change gets the next number of this feed; `read(since)` hands what
came after `since`. A cursor names its feed (`FEED.NUMBER`): one from another feed (the manager's
watch started again after it lost and regained the lead) is a `GoneError` too. What the manager has
read is dropped; if it does not read for a long time, past `KEEP` waiting Events the oldest are
dropped and a read from before them is a `GoneError`: the caller reads everything again
(`read(None)`: every Event the informers hold).
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Collection

from gpufleet.api.errors import GoneError
from gpufleet.api.numerals import plain_digits
from gpufleet.kube.informer import Backoff, Informer
from gpufleet.kube.resources import EVENT
from gpufleet.kube.transport import Json, Transport

KINDS = ("TrainingJob", "InferenceService")
KEEP = 10_000
"""Events kept for the manager's next read."""


class EventFeed:
    """A worker's Events about jobs and services, watched; `read` is None while it cannot be trusted."""

    def __init__(self, api: Transport, *, watch_seconds: int, keep: int = KEEP) -> None:
        backoff = Backoff(initial=0.2, maximum=5.0)
        self._informers = [
            Informer(
                api,
                EVENT,
                field_selector=f"involvedObject.kind={kind}",
                watch_seconds=watch_seconds,
                backoff=backoff,
            )
            for kind in KINDS
        ]
        self._lock = threading.Lock()
        self._waiting: deque[tuple[int, Json]] = deque()
        self._count = 0
        self._floor = 0
        """Events numbered up to here were dropped unread: a read from before it is Gone."""
        self._keep = keep
        self._name = uuid.uuid4().hex[:12]
        for informer in self._informers:
            informer.add_handler(self._seen)

    def start(self, stop: threading.Event) -> None:
        for informer in self._informers:
            informer.start(stop)

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self._informers)

    def read(self, namespaces: Collection[str], since: str | None) -> tuple[list[Json], str] | None:
        """The Events in `namespaces` added or changed after `since` (None: all the informers hold) and
        the cursor to read on from; None until both informers have listed. `GoneError` when what came
        after `since` was dropped unread."""
        if not self.synced:
            return None
        wanted = set(namespaces)
        with self._lock:
            if since is None:
                events = [e for i in self._informers for e in i.items() if _namespace(e) in wanted]
                self._waiting.clear()
                self._floor = self._count
                return events, self._cursor()
            feed, _, number = since.partition(".")
            after = int(number) if feed == self._name and plain_digits(number) else -1
            if after < self._floor or after > self._count:
                raise GoneError(f"the worker's Events after {since} are no longer kept", field="since")
            while self._waiting and self._waiting[0][0] <= after:
                self._waiting.popleft()  # the caller has read these: it reads on from `since`
            events = [e for _, e in self._waiting if _namespace(e) in wanted]
            return events, self._cursor()

    def _cursor(self) -> str:
        return f"{self._name}.{self._count}"

    def _seen(self, event: str, old: Json | None, new: Json | None) -> None:
        if new is None:
            return  # a deleted Event: nothing to copy
        with self._lock:
            self._count += 1
            self._waiting.append((self._count, new))
            while len(self._waiting) > self._keep:
                self._floor = self._waiting.popleft()[0]


def _namespace(event: Json) -> str:
    return str((event.get("metadata") or {}).get("namespace") or "default")
