"""The manager's watched copy of a Kubernetes worker's TrainingJobs and InferenceServices.

Listing every job and service of every worker each pass costs the manager, and each worker's API server,
all of their work every second. `CopyCache` keeps them instead with an informer per kind (list once,
then a watch from its resourceVersion: only what changed crosses the network) and hands out the models
converted once per resourceVersion, so a pass costs what changed plus a walk over the cache.

Two rules keep what `KubeWorker.list_managed` answers as true as a list:

- **Read your writes.** What the manager created or deleted through `KubeWorker` counts at once, before
  its watch event arrives: a pass right after a dispatch must see the copy (a copy seen missing is work
  the cluster stopped, and moves), and one right after a delete must not see it (by uid, so an older
  generation's copy still in the cache does not hide the new one).
- **Out of touch is said, not hidden.** Until both informers have listed, and whenever a request of theirs
  failed after their last success (a watch that broke, a relist refused), the cache is not used: the
  caller lists, as without a cache, and an API server that does not answer raises as before. A watch
  round lasts `watch_seconds`, so even a server that hangs without closing shows within that.

The worker's Events about jobs and services are watched beside them (`kube.worker_events`), so the
manager's event mirror reads only what the worker wrote since its last read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from gpufleet.api.inference import InferenceService
from gpufleet.api.kinds import kind_info
from gpufleet.api.training import TrainingJob
from gpufleet.kube.informer import Backoff, Informer
from gpufleet.kube.resources import resource_for
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.kube.worker_events import EventFeed

Managed = TrainingJob | InferenceService
Key = tuple[str, str, str]
"""(kind, namespace, name)."""
KINDS = ("TrainingJob", "InferenceService")
WATCH_SECONDS = 30


class _Health:
    """The informers' transport, noting when a request or a watch line last succeeded and failed."""

    def __init__(self, api: Transport) -> None:
        self.api = api
        self.ok = 0.0
        self.failed = 0.0

    def request(self, method: str, path: str, **kwargs: Any) -> Json:
        try:
            answer = self.api.request(method, path, **kwargs)
        except ApiError:
            self.failed = time.monotonic()
            raise
        self.ok = time.monotonic()
        return answer

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        try:
            for line in self.api.watch(path, query=query, timeout=timeout):
                self.ok = time.monotonic()
                yield line
        except Exception:
            self.failed = time.monotonic()
            raise

    @property
    def healthy(self) -> bool:
        return self.failed == 0.0 or self.ok > self.failed


class CopyCache:
    """A worker's jobs and services, watched; `managed()` is None while it cannot be trusted."""

    def __init__(self, api: Transport, *, watch_seconds: int = WATCH_SECONDS) -> None:
        self._api = api
        self._watch_seconds = watch_seconds
        self._health = _Health(api)
        self._informers = self._follow()
        self.events = EventFeed(self._health, watch_seconds=watch_seconds)
        """The worker's Events about jobs and services, watched by the same rules (`kube.worker_events`)."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._created: dict[Key, Managed] = {}
        """Created through the manager, until the cache holds that object (its uid)."""
        self._deleted: dict[Key, set[str]] = {}
        """Deleted through the manager (key -> uids), until the cache holds none of those objects."""
        self._models: dict[Key, tuple[str, Managed]] = {}
        """Each object converted once per resourceVersion."""

    def _follow(self) -> dict[str, Informer]:
        backoff = Backoff(initial=0.2, maximum=5.0)
        return {
            kind: Informer(
                self._health, resource_for(kind), watch_seconds=self._watch_seconds, backoff=backoff
            )
            for kind in KINDS
        }

    def start(self) -> None:
        """Starts watching; after `close`, afresh (new informers: the old threads end on their own)."""
        with self._lock:
            if self._started and not self._stop.is_set():
                return
            if self._started:  # closed: a replica that leads again
                self._stop = threading.Event()
                self._health = _Health(self._api)
                self._informers = self._follow()
                self.events = EventFeed(self._health, watch_seconds=self._watch_seconds)
                self._models.clear()
            self._started = True
            informers, events, stop = list(self._informers.values()), self.events, self._stop
        for informer in informers:
            informer.start(stop)
        events.start(stop)

    def close(self) -> None:
        self._stop.set()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def events_after(self, namespaces: Collection[str], since: str | None) -> tuple[list[Json], str] | None:
        """The worker's Events after the cursor (`EventFeed.read`); None while the feed cannot be trusted
        (not listed yet, its last request failed, closed): the caller lists them."""
        if self.closed or not self._health.healthy:
            return None
        return self.events.read(namespaces, since)

    def managed(self) -> list[Managed] | None:
        """Every job and service of the worker as it stands, with the manager's own writes (shared:
        read-only); None until both informers have listed, while their last request failed, and once
        closed."""
        if self.closed or not self._health.healthy or not all(i.synced for i in self._informers.values()):
            return None  # closed: its informers no longer follow the server
        with self._lock:
            seen: dict[Key, Json] = {}
            for kind, informer in self._informers.items():
                for obj in informer.items():
                    meta = obj["metadata"]
                    seen[(kind, meta.get("namespace") or "default", meta["name"])] = obj
            for key, uids in list(self._deleted.items()):
                if _uid(seen.get(key)) not in uids:
                    del self._deleted[key]  # gone from the cache, or another object by now
                else:
                    del seen[key]
            for key in [k for k in self._models if k not in seen]:
                del self._models[key]
            found = {key: self._model(key, obj) for key, obj in seen.items()}
            for key, mine in list(self._created.items()):
                if _uid(seen.get(key)) == mine.metadata.uid:
                    del self._created[key]  # the watch has it now
                else:
                    found[key] = mine
            return list(found.values())

    @property
    def unconfirmed(self) -> int:
        """The manager's creates and deletes its watch had not shown at the last `managed()`."""
        with self._lock:
            return len(self._created) + len(self._deleted)

    def created(self, obj: Managed) -> None:
        """An object the manager created (as the API server answered: with its uid)."""
        key = (obj.kind, obj.namespace or "default", obj.name)
        with self._lock:
            self._deleted.pop(key, None)
            self._created[key] = obj

    def deleted(self, key: Key) -> None:
        kind, namespace, name = key
        with self._lock:
            mine = self._created.pop(key, None)
            informer = self._informers.get(kind)
            cached = informer.get(f"{namespace}/{name}") if informer is not None else None
            # Both, when the cache still shows an older generation the manager had replaced: neither
            # may show until the watch has caught up.
            uids = {_uid(cached), (mine.metadata.uid or "") if mine is not None else ""} - {""}
            if uids:
                self._deleted[key] = uids

    def _model(self, key: Key, obj: Json) -> Managed:
        version = str(obj["metadata"].get("resourceVersion", ""))
        known = self._models.get(key)
        if known is not None and known[0] == version:
            return known[1]
        info = kind_info(key[0])
        assert info is not None  # both kinds are registered with the API
        model = from_json(info, obj)
        assert isinstance(model, TrainingJob | InferenceService)
        self._models[key] = (version, model)
        return model


def _uid(obj: Json | None) -> str:
    return str((obj or {}).get("metadata", {}).get("uid") or "")
