"""Informers: one shared, always-current cache per kind, fed by list-then-watch.

The loop is client-go's reflector: list (which gives a resourceVersion), watch from it with bookmarks
(which move the resourceVersion on without changes), list again when the server answers 410 Gone,
and back off exponentially while the server cannot be reached. Handlers see every change once, in
order; after a relist they see the difference between the old cache and the new list.

The client's own `kubernetes.informer.SharedInformer` is not used: it decodes into generated model
classes, has no backoff, and is tied to the generated list functions; this one works on the JSON the
rest of `kube/` uses and runs against the in-memory stand-in in unit tests.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from gpufleet.kube.resources import ResourceType
from gpufleet.kube.transport import ApiError, Json, Transport

log = logging.getLogger(__name__)

Handler = Callable[[str, Json | None, Json | None], None]
"""Called as `handler(event, old, new)` with event ADDED (old None), MODIFIED or DELETED (new None)."""

WATCH_SECONDS = 300
HOLD_PAGES_SECONDS = 2.0
"""How long a paged first list that holds its pages (`hold_pages`) waits after the first page for
`release_pages`: a consumer that never comes does not keep the informer from syncing."""

HANDLER_ERRORS = Counter(
    "gpufleet_informer_handler_errors",
    "Informer handlers that raised on an object (each such object is handed to them again).",
    ["resource"],
)


def key_of(obj: Json) -> str:
    """`namespace/name`, or `name` for cluster-wide objects (client-go's MetaNamespaceKey)."""
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


@dataclass(slots=True)
class Backoff:
    """Exponential delays with full jitter: `initial`, doubling up to `maximum`; `reset` after success."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    rng: random.Random = field(default_factory=random.Random)
    _next: float = 0.0

    def delay(self) -> float:
        self._next = self.initial if self._next == 0 else min(self._next * self.factor, self.maximum)
        return self._next * (0.5 + self.rng.random() / 2)

    def reset(self) -> None:
        self._next = 0.0


class Informer:
    """List-then-watch of one resource (optionally one namespace, label and field selector)."""

    def __init__(
        self,
        transport: Transport,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        backoff: Backoff | None = None,
        watch_seconds: int = WATCH_SECONDS,
        page_size: int | None = None,
        known_first: str | None = None,
        hold_pages: bool = False,
    ) -> None:
        """`page_size`: the first list is read in pages, each handed to the handlers as it arrives, and
        `known_first` (a field selector) names the objects listed whole before the first page; `ready`
        is set once they and the first page are known, `synced` once every page is in (see `relist`).
        `hold_pages`: the pages after the first wait for `release_pages` (at most
        `HOLD_PAGES_SECONDS`), so a consumer's first pass over the first page does not share the
        process with decoding the rest."""
        self.resource = resource
        self._api = transport
        self._namespace = namespace
        self._selectors: dict[str, str | int | bool] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        self._backoff = backoff or Backoff()
        self._watch_seconds = watch_seconds
        self._lock = threading.RLock()
        self._items: dict[str, Json] = {}
        self._handlers: list[Handler] = []
        self._failed: dict[str, list[Handler]] = {}
        """Objects (by key) a handler raised on, and those handlers: told again until they take it."""
        self._synced = threading.Event()
        self._ready = threading.Event()
        self._page_size = page_size
        self._known_first = known_first
        self._pages_released = threading.Event()
        if not hold_pages:
            self._pages_released.set()
        self.resource_version: str | None = None
        self.relists = 0

    # ------------------------------------------------------------------ the cache
    def get(self, key: str) -> Json | None:
        with self._lock:
            return self._items.get(key)

    def keys(self) -> list[str]:
        """The keys of every cached object (`namespace/name`, or `name` for cluster-wide ones)."""
        with self._lock:
            return list(self._items)

    def items(self) -> list[Json]:
        """Every cached object (shared: treat as read-only)."""
        with self._lock:
            return list(self._items.values())

    def add_handler(self, handler: Handler) -> None:
        """Registers a handler; it is told about objects already cached as ADDED."""
        with self._lock:
            self._handlers.append(handler)
            for obj in self._items.values():
                handler("ADDED", None, obj)

    def release_pages(self) -> None:
        """Lets a paged first list that holds its pages go on reading them."""
        self._pages_released.set()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def ready(self) -> bool:
        """Whether the objects that must be known first are: all of them once synced; with paging, the
        `known_first` ones and the first page, while the pages of the rest still come."""
        return self._ready.is_set()

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    # ------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event) -> None:
        """Lists and watches until `stop` is set, recovering from every failure."""
        while not stop.is_set():
            try:
                self.step(stop)
                self._backoff.reset()
            except ApiError as exc:
                if exc.status == 410:
                    log.info("%s: watch expired (%s); listing again", self.resource.plural, exc.message)
                    self.resource_version = None
                    continue
                self._pause(stop, exc)
            except Exception as exc:  # a dropped connection or a malformed line: start over
                self._pause(stop, exc)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop,), daemon=True, name=f"informer-{self.resource.plural}"
        )
        thread.start()
        return thread

    def step(self, stop: threading.Event | None = None) -> None:
        """One round: a list if there is no resourceVersion yet, then one watch until the server ends it."""
        if self.resource_version is None:
            self.relist()
        query: dict[str, str | int | bool] = {
            **self._selectors,
            "watch": True,
            "resourceVersion": self.resource_version or "0",
            "allowWatchBookmarks": True,
            "timeoutSeconds": self._watch_seconds,
        }
        path = self.resource.collection(self._namespace)
        for line in self._api.watch(path, query=query, timeout=self._watch_seconds + 10):
            self._apply(line)
            self.resync_failed()
            if stop is not None and stop.is_set():
                return

    def relist(self) -> None:
        """Replaces the cache with a fresh list, telling handlers what changed.

        The first list is served from the API server's watch cache (`resourceVersion=0`), as
        client-go's reflector asks: far cheaper for the server than a read through to etcd, and the
        watch from its resourceVersion delivers whatever it lacked. A relist after 410 Gone reads
        through, since the cache being too old is what 410 said."""
        if self._page_size is not None and not self.synced:
            self._relist_in_pages(self._page_size)
            return
        query: dict[str, str | int | bool] = dict(self._selectors)
        if not self.synced:
            query["resourceVersion"] = "0"
        answer = self._api.request("GET", self.resource.collection(self._namespace), query=query)
        fresh = {key_of(item): _with_kind(item, self.resource) for item in answer.get("items", [])}
        with self._lock:
            old = self._items
            self._items = fresh
            self.resource_version = str(answer.get("metadata", {}).get("resourceVersion", "0"))
            self.relists += 1
            for key, obj in old.items():
                if key not in fresh:
                    self._fire("DELETED", obj, None)
            for key, obj in fresh.items():
                self._tell_listed(old.get(key), obj)
        self._ready.set()
        self._synced.set()

    def _relist_in_pages(self, size: int) -> None:
        """The first list, read so that a consumer can start before the last page is in.

        The `known_first` objects come first, whole, from the watch cache; then every object in pages of
        `size` (a consistent list: each page of one snapshot, whose resourceVersion the watch starts
        from). Each page reaches the handlers as it arrives, as if its objects had just been created; the
        objects missing from the pages once all are in are deleted. A continue token that expired (410)
        ends in a relist from the start, like any 410."""
        path = self.resource.collection(self._namespace)
        if self._known_first is not None:
            query: dict[str, str | int | bool] = dict(self._selectors)
            own = self._selectors.get("fieldSelector")
            query["fieldSelector"] = f"{own},{self._known_first}" if own else self._known_first
            query["resourceVersion"] = "0"
            self._upsert(self._api.request("GET", path, query=query).get("items", []))
        seen: set[str] = set()
        version: str | None = None
        token: str | None = None
        while True:
            query = {**self._selectors, "limit": size, **({"continue": token} if token else {})}
            answer = self._api.request("GET", path, query=query)
            seen |= self._upsert(answer.get("items", []))
            meta = answer.get("metadata", {})
            version = version or str(meta.get("resourceVersion", "0"))
            token = meta.get("continue") or None
            self._ready.set()  # the first pass need not wait for more than the first page
            if token is None:
                break
            self._pages_released.wait(HOLD_PAGES_SECONDS)
        with self._lock:
            for key in [k for k in self._items if k not in seen]:
                self._fire("DELETED", self._items.pop(key), None)
            self.resource_version = version
            self.relists += 1
        self._synced.set()

    def _upsert(self, items: list[Json]) -> set[str]:
        """Adds or replaces listed objects, telling handlers of each that is new or changed."""
        keys = set()
        with self._lock:
            for item in items:
                obj = _with_kind(item, self.resource)
                key = key_of(obj)
                keys.add(key)
                before = self._items.get(key)
                self._items[key] = obj
                self._tell_listed(before, obj)
        return keys

    def _tell_listed(self, before: Json | None, obj: Json) -> None:
        """Tells handlers of a listed object that is new, or changed since the cache's copy."""
        if before is None:
            self._fire("ADDED", None, obj)
        elif before["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
            self._fire("MODIFIED", before, obj)

    # ------------------------------------------------------------------ internals
    def _apply(self, line: Json) -> None:
        kind, obj = line["type"], line["object"]
        version = obj.get("metadata", {}).get("resourceVersion")
        with self._lock:
            if kind == "BOOKMARK":
                self.resource_version = version or self.resource_version
                return
            obj = _with_kind(obj, self.resource)
            key = key_of(obj)
            before = self._items.get(key)
            if kind == "DELETED":
                self._items.pop(key, None)
                self._fire("DELETED", before or obj, None)
            else:
                self._items[key] = obj
                self._fire("ADDED" if before is None else "MODIFIED", before, obj)
            self.resource_version = version or self.resource_version

    def resync_failed(self) -> None:
        """Hands each object a handler raised on to that handler again, as it is now, so what the handler
        keeps does not drift from the server until the next relist."""
        if not self._failed:
            return
        with self._lock:
            failed, self._failed = self._failed, {}
            for key, handlers in failed.items():
                current = self._items.get(key)
                for handler in handlers:
                    if current is None:
                        self._call(handler, key, "DELETED", _stub(key, self.resource), None)
                    else:
                        self._call(handler, key, "MODIFIED", None, current)

    def _fire(self, event: str, old: Json | None, new: Json | None) -> None:
        key = key_of(new or old or {"metadata": {"name": ""}})
        for handler in self._handlers:
            self._call(handler, key, event, old, new)

    def _call(self, handler: Handler, key: str, event: str, old: Json | None, new: Json | None) -> None:
        try:
            handler(event, old, new)
        except Exception:  # one broken handler must not stop the cache from following the server
            HANDLER_ERRORS.labels(self.resource.plural).inc()
            log.exception("%s: handler failed on %s %s; it is told again", self.resource.plural, event, key)
            waiting = self._failed.setdefault(key, [])
            if handler not in waiting:
                waiting.append(handler)

    def _pause(self, stop: threading.Event, exc: BaseException) -> None:
        delay = self._backoff.delay()
        log.warning("%s: %s; retrying in %.1fs", self.resource.plural, exc, delay)
        stop.wait(delay)


def collect_after_sync(informers: Informers, stop: threading.Event) -> threading.Thread:
    """Pauses the cyclic garbage collector while the first lists come in, then freezes what they built.

    The informers' copies are most of a scheduler's heap (tens of thousands of decoded objects) and live
    as long as the process; while they are built, each full collection would walk all of them, and
    afterwards each would walk them again for nothing (JSON objects form no cycles; refcounting frees
    them). Frozen, they are left out of every collection. Call before starting the informers."""

    def wait() -> None:
        try:
            while not informers.wait_for_sync(0.5):
                if stop.is_set():
                    return
            gc.freeze()
        finally:
            gc.enable()

    gc.disable()
    thread = threading.Thread(target=wait, daemon=True, name="informers-gc")
    thread.start()
    return thread


def _stub(key: str, resource: ResourceType) -> Json:
    """An object gone from the cache, known only by its key (for a DELETED told again)."""
    namespace, _, name = key.rpartition("/")
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}


def _with_kind(obj: Json, resource: ResourceType) -> Json:
    # Items of a list carry no kind or apiVersion; watch events do. Make both look the same.
    if "kind" not in obj:
        obj = {"kind": resource.kind, "apiVersion": resource.api_version, **obj}
    return obj


class Informers:
    """One informer per (resource, namespace, selectors), shared by everything in the process."""

    def __init__(self, transport: Transport, **options: Any) -> None:
        self._api = transport
        self._options = options
        self._informers: dict[tuple[str, str | None, str | None, str | None], Informer] = {}
        self._threads: list[threading.Thread] = []

    def informer(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = None,
        known_first: str | None = None,
        hold_pages: bool = False,
    ) -> Informer:
        """The shared informer of that resource and selection; `page_size`, `known_first` and
        `hold_pages` (see `Informer`) apply when this call makes it."""
        key = (resource.collection(namespace), namespace, label_selector, field_selector)
        found = self._informers.get(key)
        if found is None:
            found = Informer(
                self._api,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                page_size=page_size,
                known_first=known_first,
                hold_pages=hold_pages,
                **self._options,
            )
            self._informers[key] = found
        return found

    def start(self, stop: threading.Event) -> None:
        """Starts every informer made so far that is not running yet."""
        for informer in list(self._informers.values())[len(self._threads) :]:
            self._threads.append(informer.start(stop))

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return all(informer.wait_for_sync(timeout) for informer in self._informers.values())

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Whether every informer is ready (`Informer.ready`): synced, or listing its last pages."""
        return all(informer.wait_until_ready(timeout) for informer in self._informers.values())
