"""The Store protocol in memory: the simulator's store, with the SQLite store's semantics and no file.

`gpufleet simulate` throws its state away, yet paid for a file: every write serialised the object to
JSON, ran half a dozen SQL statements and every read parsed JSON again (a third of a simulation's
CPU). This store keeps each object's JSON form (`Resource.to_dict`) in dictionaries and applies the
same rules to it as the SQLite store (`store.objects`): resourceVersion and generation, conflicts,
status only through `update_status`, finalizers, batches all or none, label selectors, an event log
with cursors, retention and compaction (`GoneError`), and validation of every object written.

Isolation. A stored form is never changed in place (a write builds a new one from a shallow copy,
as in the SQLite store), so the object table and the event log share them. Nothing handed out
shares anything with them: every model returned or carried by an event is validated from a copy
of the stored form in which every value pydantic keeps as given (the values of `dict[str, Any]`
fields: a pod template, a pending reason's details) is deep-copied, since a caller changing such a
value in place would otherwise change the store. Validation builds every other container anew, so
only those values are copied (`store.fresh`), a pickle round trip each, done in C.

Readers of an event share one object and none changes it (as in the SQLite store). With
`share_results` (the simulator's store) the writer joins them: a write's result is its event's
object, so each object written is validated once rather than again for its readers (about a tenth
of a simulation's CPU). Such a store also keeps each object's last result, and a write that
changes only its status, or its spec, or deletes it, validates just that section and derives the
rest from that result (`store.derived`). Every controller copies what it changes
(`model_copy(update=...)`) instead of changing a result in place; a client of the Store protocol
at large may change what a write returns, so by default a write's result is its own. With
`check_shared` (on in the test suite: `GPUFLEET_STORE_CHECKS=1`) every read of an event compares its
object with the stored form and raises `SharedObjectChanged` where someone changed it.

Threads. One lock guards everything, as in the SQLite store, so the HTTP API may share it; watches
wait on a condition that writers signal. Nothing survives the process.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, overload

from gpufleet.api.errors import ConflictError, ValidationError
from gpufleet.api.labels import LabelSelector
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.store.derived import derive
from gpufleet.store.discard import Discards
from gpufleet.store.fresh import fresh
from gpufleet.store.objects import (
    Json,
    describe,
    gone,
    kind_of,
    load,
    namespace_of,
    new_uid,
    utc_now,
    version_of,
)
from gpufleet.store.protocol import EventType, ListResult, Selector, Store, WatchEvent
from gpufleet.store.watch import LogWatch
from gpufleet.store.writes import ObjectWrites

R = TypeVar("R", bound=Resource)
Key = tuple[str, str]
"""(namespace, name); the namespace is '' for cluster-wide kinds."""

COMPACT_EVERY = 256
"""Writes between two automatic compactions of the event log (as in the SQLite store)."""
PARSED_EVENTS = 8192
"""How many of the latest events keep their parsed object for the next reader (a settle round's
worth): every watcher of a process reads the same new events, and each is validated once."""


@dataclass(slots=True)
class _Entry:
    """One event of the log: the stored form it carries and, once a reader asked, its parsed event."""

    version: int
    type: EventType
    kind: str
    namespace: str
    data: Json
    parsed: WatchEvent | None = None


@dataclass(slots=True)
class _Undo:
    """What a transaction changed, to put back if it fails: each object's previous form (None: absent)."""

    head: int
    objects: list[tuple[dict[Key, Json], Key, Json | None]]


def _model(info: KindInfo, data: Json) -> Resource:
    """A model of a stored form that shares nothing with it (`store.fresh`)."""
    return load(info, fresh(info.model, data))


class SharedObjectChanged(RuntimeError):
    """An event's object (or the result of the write that made it) was changed in place."""


def _checks_from_environment() -> bool:
    return os.environ.get("GPUFLEET_STORE_CHECKS", "") not in ("", "0")


class MemoryStore(ObjectWrites):
    """The Store protocol in memory (see the module docstring).

    `event_retention` is how many recent events the log keeps; a watch from further back raises
    `GoneError`. `clock` stamps creation and deletion times (the simulator passes a virtual one).
    `discard_kinds`: kinds validated on create but neither stored nor logged (`store.discard`).
    `share_results`: a write returns its event's object (see the module docstring); the caller must
    not change it in place.
    `check_shared`: compare every event's object with its stored form when it is read (default: on
    when `GPUFLEET_STORE_CHECKS` is set), to find whoever changes a shared object in place.
    """

    def __init__(
        self,
        *,
        event_retention: int = 10_000,
        clock: Callable[[], datetime] = utc_now,
        discard_kinds: Iterable[str] = (),
        share_results: bool = False,
        check_shared: bool | None = None,
    ) -> None:
        if event_retention < 1:
            raise ValueError("event_retention must be at least 1")
        self._discards = Discards(discard_kinds)
        self._share_results = share_results
        self._check_shared = _checks_from_environment() if check_shared is None else check_shared
        self._retention = event_retention
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._own = threading.local()
        self._objects: dict[str, dict[Key, Json]] = {}
        """kind -> (namespace, name) -> the object's stored form."""
        self._log: deque[_Entry] = deque()
        """Every event after `_compacted`, one per version (version v at index v - _compacted - 1)."""
        self._head = 0
        self._compacted = 0
        self._parsed: deque[_Entry] = deque()
        """Entries holding a parsed event, oldest first; beyond `PARSED_EVENTS` the oldest let go."""
        self._undo: _Undo | None = None
        self._results: dict[tuple[str, str, str], tuple[Json, Resource]] = {}
        """With `share_results`: (kind, namespace, name) -> the stored form and the model its last write
        returned, from which a next write of a section or its deletion is derived (`store.derived`).
        The pair holds only while the form is still the stored one (a rolled-back write leaves another)."""

    def close(self) -> None:
        self._wake_watchers()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- reads

    @property
    def resource_version(self) -> str:
        return str(self._head)

    def writes_by_this_thread(self) -> int:
        """How many changes the calling thread has made (each new resourceVersion counts one)."""
        return int(getattr(self._own, "writes", 0))

    @overload
    def get(self, kind: type[R], name: str, namespace: str | None = None) -> R: ...
    @overload
    def get(self, kind: str, name: str, namespace: str | None = None) -> Resource: ...
    def get(self, kind: type[R] | str, name: str, namespace: str | None = None) -> Resource:
        info = kind_of(kind)
        ns = namespace_of(info, namespace)
        with self._lock:
            data = self._current(info, ns, name)
        return _model(info, data)

    @overload
    def list(
        self, kind: type[R], *, namespace: str | None = None, label_selector: Selector = None
    ) -> ListResult[R]: ...
    @overload
    def list(
        self, kind: str, *, namespace: str | None = None, label_selector: Selector = None
    ) -> ListResult[Resource]: ...
    def list(
        self, kind: type[R] | str, *, namespace: str | None = None, label_selector: Selector = None
    ) -> ListResult[R] | ListResult[Resource]:
        info = kind_of(kind)
        selector = LabelSelector.parse(label_selector)
        ns = None if namespace is None else namespace_of(info, namespace)
        with self._lock:
            table = self._objects.get(info.kind, {})
            rows = sorted((key, data) for key, data in table.items() if ns is None or key[0] == ns)
            head = self._head
        items = [
            _model(info, data) for _, data in rows if selector.matches(data["metadata"].get("labels", {}))
        ]
        return ListResult(items=items, resource_version=str(head))

    def events_since(
        self,
        resource_version: str | int,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[WatchEvent]:
        events, _ = self._read_events(version_of(resource_version), kinds, namespace, limit)
        return events

    def events_page(
        self, resource_version: str | int, *, kinds: Sequence[str] | None = None, limit: int | None = None
    ) -> tuple[builtins.list[WatchEvent], int]:
        """`events_since` and the version every entry up to which was looked at (`store.eventpage`)."""
        events, head = self._read_events(version_of(resource_version), kinds, None, limit)
        if limit is not None and len(events) >= limit:
            return events, events[-1].resource_version
        return events, head

    def watch(
        self,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        since: str | int | None = None,
        timeout: float | None = None,
    ) -> LogWatch:
        start = self._head if since is None else version_of(since)
        for kind in kinds or ():
            kind_of(kind)
        return LogWatch(self, kinds=kinds, namespace=namespace, since=start, timeout=timeout)

    # ------------------------------------- writes: store.writes.ObjectWrites over the primitives below

    def compact(self, *, keep: int | None = None) -> int:
        """Drops all but the newest `keep` events (default: the retention); returns the oldest version
        a watch may still start from."""
        with self._lock:
            return self._compact_locked(self._retention if keep is None else keep)

    # -------------------------------------------------------------------------------- internals

    def _transaction(self) -> _Transaction:
        """Writes inside it are kept all together or, on any exception, undone all together."""
        return _Transaction(self)

    def _find(self, info: KindInfo, ns: str, name: str) -> Json | None:
        return self._objects.get(info.kind, {}).get((ns, name))

    def _create_locked(self, info: KindInfo, data: Json) -> Resource:
        meta = data["metadata"]
        ns, name = namespace_of(info, meta.get("namespace")), meta["name"]
        if meta.get("resourceVersion"):
            raise ValidationError(
                "must not be set when creating an object",
                obj=describe(info, ns, name),
                field="metadata.resourceVersion",
            )
        if (ns, name) in self._objects.get(info.kind, {}):
            raise ConflictError("already exists", obj=describe(info, ns, name))
        version = self._head + 1
        meta.update(
            uid=meta.get("uid") or new_uid(),
            resourceVersion=str(version),
            generation=1,
            creationTimestamp=self._clock(),
        )
        meta.pop("deletionTimestamp", None)
        if "status" in info.model.model_fields:
            data.pop("status", None)  # status is written through update_status, as in Kubernetes
        return self._record(info, ns, name, "ADDED", data, owned=True)

    def _change_locked(
        self, info: KindInfo, ns: str, name: str, current: Json, changed: Json, *, remove: bool = False
    ) -> Resource:
        if not remove and changed == current:
            return _model(info, current)  # nothing changed: no new version, no event
        meta = changed["metadata"]
        if not remove and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            remove = True  # the last finalizer went: the deletion completes
        meta["resourceVersion"] = str(self._head + 1)
        event: EventType = "DELETED" if remove else "MODIFIED"
        if self._share_results:
            previous = self._results.get((info.kind, ns, name))
            if previous is not None and previous[0] is current:
                derived = derive(info, previous[1], current, changed)
                if derived is not None:
                    return self._record(info, ns, name, event, derived[1], result=derived[0])
        return self._record(info, ns, name, event, changed)

    def _record(
        self,
        info: KindInfo,
        ns: str,
        name: str,
        event: EventType,
        data: Json,
        *,
        owned: bool = False,
        result: Resource | None = None,
    ) -> Resource:
        """Validates the object as written, stores it (or removes it) at the next version and logs it;
        returns the validated object, which shares nothing with what is stored (with `share_results`,
        the object its event carries). `owned`: `data` is the caller's own dump, shared with nothing
        stored (a change shares the current form's values). `result`: the object already validated
        (`store.derived`), and `data` its stored form."""
        if result is None:
            result = load(info, data if owned else fresh(info.model, data))
            stored = result.to_dict(reveal_secrets=True)
        else:
            stored = data
        table = self._objects.setdefault(info.kind, {})
        key = (ns, name)
        if self._undo is not None:
            self._undo.objects.append((table, key, table.get(key)))
        if event == "DELETED":
            del table[key]
            if self._share_results:
                self._results.pop((info.kind, ns, name), None)
        else:
            table[key] = stored
            if self._share_results:
                self._results[(info.kind, ns, name)] = (stored, result)
        self._head += 1
        entry = _Entry(self._head, event, info.kind, ns, stored)
        self._log.append(entry)
        if self._share_results:
            self._keep_parsed(entry, WatchEvent(type=event, object=result, resource_version=self._head))
        return result

    def _compact_locked(self, keep: int) -> int:
        floor = max(self._compacted, self._head - max(keep, 0))
        while self._log and self._log[0].version <= floor:
            self._log.popleft()
        # No reader can ask for a compacted entry again: its parsed event goes now, not 8,192 later.
        while self._parsed and self._parsed[0].version <= floor:
            self._parsed.popleft().parsed = None
        self._compacted = floor
        return floor

    def _read_events(
        self, since: int, kinds: Sequence[str] | None, namespace: str | None, limit: int | None
    ) -> tuple[builtins.list[WatchEvent], int]:
        events: builtins.list[WatchEvent] = []
        with self._lock:
            if since < self._compacted:
                raise gone(since, self._compacted)
            if since >= self._head:
                return events, self._head  # nothing new: most reads of a view caught up already
            wanted = set(kinds) if kinds else None
            log = self._log
            for index in range(since - self._compacted, len(log)):
                entry = log[index]
                if wanted is not None and entry.kind not in wanted:
                    continue
                if namespace is not None and entry.namespace != namespace:
                    continue
                parsed = entry.parsed or self._parse(entry)
                if self._check_shared:
                    _check_unchanged(entry, parsed)
                events.append(parsed)
                if limit is not None and len(events) >= limit:
                    break
            return events, self._head

    def _parse(self, entry: _Entry) -> WatchEvent:
        """The entry's event with its object validated, kept for the next readers (the latest
        `PARSED_EVENTS`); readers share it, as those of the SQLite store do, and none changes it."""
        obj = _model(kind_of(entry.kind), entry.data)
        parsed = WatchEvent(type=entry.type, object=obj, resource_version=entry.version)
        self._keep_parsed(entry, parsed)
        return parsed

    def _keep_parsed(self, entry: _Entry, parsed: WatchEvent) -> None:
        entry.parsed = parsed
        self._parsed.append(entry)
        if len(self._parsed) > PARSED_EVENTS:
            self._parsed.popleft().parsed = None

    def _wait_for_change(self, after: int, timeout: float, stop: Callable[[], bool]) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._head > after or stop(), timeout)

    def _wake_watchers(self) -> None:
        with self._changed:
            self._changed.notify_all()


def _check_unchanged(entry: _Entry, parsed: WatchEvent) -> None:
    if parsed.object.to_dict(reveal_secrets=True) != entry.data:
        meta = entry.data.get("metadata") or {}
        raise SharedObjectChanged(
            f"{entry.kind} {entry.namespace}/{meta.get('name')} at version {entry.version} was changed "
            "in place after it was written or read: a write's result and an event's object are shared; "
            "copy it with model_copy(update=...) before changing it"
        )


class _Transaction:
    """`MemoryStore._transaction`: a class, not a `contextmanager` generator, since every write opens
    one and a generator's set-up and tear-down cost several times the work of these two calls."""

    __slots__ = ("store", "undo")

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        store = self.store
        store._lock.acquire()
        if store._undo is not None:  # pragma: no cover - writes never nest
            store._lock.release()
            raise RuntimeError("a store transaction is already open")
        self.undo = store._undo = _Undo(store._head, [])

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        store, undo = self.store, self.undo
        try:
            store._undo = None
            if kind is not None:
                for table, key, previous in reversed(undo.objects):
                    if previous is None:
                        table.pop(key, None)
                    else:
                        table[key] = previous
                while store._log and store._log[-1].version > undo.head:
                    store._log.pop().parsed = None
                while store._parsed and store._parsed[-1].version > undo.head:
                    store._parsed.pop()
                store._head = undo.head
                return  # the exception goes on
            written = store._head - undo.head
            if written:
                if store._head // COMPACT_EVERY > undo.head // COMPACT_EVERY:
                    store._compact_locked(store._retention)
                store._own.writes = store.writes_by_this_thread() + written
                store._changed.notify_all()
        finally:
            store._lock.release()


if TYPE_CHECKING:  # mypy proves that MemoryStore implements the Store protocol

    def _implements_store(store: MemoryStore) -> Store:
        return store
