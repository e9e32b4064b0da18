"""The embedded Store: one SQLite file, every write one transaction, an event log for watches.

Durability. The database runs in WAL mode with `synchronous=FULL` by default: a write is
acknowledged only after its commit record is fsynced, so neither `kill -9` nor a power loss loses an
acknowledged write. `synchronous=NORMAL` (fsync only at checkpoints) still survives `kill -9`, since
the WAL is in the OS page cache, but may lose the last commits on power loss; the simulator, whose
state is throw-away, may choose it (or OFF) for speed.

Atomicity. A write changes the object row, appends its event and advances the resourceVersion
counter in one `BEGIN IMMEDIATE` transaction: after a crash either all three happened or none.
`apply_many` and `delete_many` put a whole batch in one such transaction: its events carry
consecutive versions and after a crash (or an error in any of its objects) the batch is there whole
or not at all.

Threads. One connection is shared under a lock, so controllers and an HTTP server may call the store
from any thread of the process. Watchers wait on a condition that writers signal; they also re-read
the log every `POLL_SECONDS`, so writes from another process sharing the file are seen too. Each
thread's committed writes are counted (`writes_by_this_thread`), so the runtime can tell the
controllers' own writes from those the HTTP API makes meanwhile.
"""

from __future__ import annotations

import builtins
import json
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from gpufleet.api.errors import ConflictError, ValidationError
from gpufleet.api.labels import LabelSelector
from gpufleet.api.resource import KindInfo, Resource
from gpufleet.store.discard import Discards
from gpufleet.store.eventtail import EventTail, TailEvent
from gpufleet.store.objects import (
    STORED,
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
Synchronous = Literal["FULL", "NORMAL", "OFF"]

FILE_NAME = "gpufleet.db"
COMPACT_EVERY = 256
"""Writes between two automatic compactions of the event log."""
PARSED_EVENTS = 8192
"""How many of the latest events are kept parsed for the next reader (a settle round's worth)."""
TAIL_EVENTS = 16384
"""How many of the latest events this connection committed are kept to answer reads without SQL."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,          -- '' for cluster-wide kinds
    name TEXT NOT NULL,
    resource_version INTEGER NOT NULL,
    body TEXT NOT NULL,               -- the object as JSON, in its YAML field names
    PRIMARY KEY (kind, namespace, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    resource_version INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('resource_version', 0), ('compacted_through', 0);
"""

SqliteWatch = LogWatch
"""A watch on a SqliteStore (the embedded stores share one kind of watch)."""


class SqliteStore(ObjectWrites):
    """The Store protocol on SQLite (see the module docstring for durability and threads).

    `event_retention` is how many recent events the watch log keeps; a watch from further back
    raises `GoneError`. `clock` stamps creation and deletion times (the twin passes a virtual one).
    `discard_kinds`: kinds validated on create but neither stored nor logged (`store.discard`).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        event_retention: int = 10_000,
        clock: Callable[[], datetime] = utc_now,
        discard_kinds: Iterable[str] = (),
    ) -> None:
        if event_retention < 1:
            raise ValueError("event_retention must be at least 1")
        self._discards = Discards(discard_kinds)
        self._path = str(path)
        self._retention = event_retention
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._own = threading.local()
        self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        self._head = self._counter("resource_version")
        self._compacted = self._counter("compacted_through")
        self._tail = EventTail(TAIL_EVENTS)
        self._tail.reset(self._head)
        self._data_version: int | None = self._foreign_writes()
        """SQLite's count of other connections' commits when `_head`, `_compacted` and the tail were
        last known complete; None when they must be read again (after a rollback)."""
        self._parsed: OrderedDict[int, WatchEvent] = OrderedDict()
        """The latest events read, parsed: every watcher of a process (each controller, its views,
        the twin, the simulator's recorder) reads the same new events, and parsing and validating
        each once per reader was an eighth of a simulation's CPU. Readers share the objects, as
        the controllers sharing one manager always did: none changes what it is handed."""
        self._parsed_lock = threading.Lock()

    @classmethod
    def open(cls, state_dir: str | Path, **options: Any) -> SqliteStore:
        """The store of a state directory (created if missing), in the file `gpufleet.db`."""
        directory = Path(state_dir)
        directory.mkdir(parents=True, exist_ok=True)
        return cls(directory / FILE_NAME, **options)

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._changed.notify_all()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- reads

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._counter("resource_version"))

    def writes_by_this_thread(self) -> int:
        """How many changes the calling thread has committed (each new resourceVersion counts one)."""
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
        return load(info, data)

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
        query = "SELECT body FROM objects WHERE kind = ?"
        params: builtins.list[str] = [info.kind]
        if namespace is not None:
            query += " AND namespace = ?"
            params.append(namespace_of(info, namespace))
        for clause, values in _label_filters(selector):
            query += clause
            params.extend(values)
        with self._read() as db:
            rows = db.execute(query + " ORDER BY namespace, name", params).fetchall()
            head = self._counter("resource_version")
        items = []
        for (body,) in rows:
            data = json.loads(body)
            if selector.matches(data["metadata"].get("labels", {})):
                items.append(load(info, data))
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

    def watch(
        self,
        *,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
        since: str | int | None = None,
        timeout: float | None = None,
    ) -> LogWatch:
        start = self._counter_locked("resource_version") if since is None else version_of(since)
        for kind in kinds or ():
            kind_of(kind)
        return LogWatch(self, kinds=kinds, namespace=namespace, since=start, timeout=timeout)

    # ------------------------------------- writes: store.writes.ObjectWrites over the primitives below

    def compact(self, *, keep: int | None = None) -> int:
        """Drops all but the newest `keep` events (default: the retention); returns the oldest version
        a watch may still start from."""
        with self._transaction():
            return self._compact_locked(self._retention if keep is None else keep)

    # -------------------------------------------------------------------------------- internals

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._sync_locked()
                start = self._head
                yield self._db
                written = self._head - start
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                self._tail.pending.clear()
                self._data_version = None  # head, compaction and tail are read again before use
                self._head = self._counter("resource_version")
                raise
            self._tail.commit()
            self._own.writes = self.writes_by_this_thread() + written
            self._changed.notify_all()

    def _foreign_writes(self) -> int:
        """SQLite's `data_version`: it changes when another connection commits to the file, never
        for this connection's own commits."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def _sync_locked(self) -> None:
        """Inside a write transaction: if another connection committed since this one last looked
        (or a rollback left the in-memory head unsure), reads the head and compaction floor again
        and starts the event tail afresh from the head."""
        version = self._foreign_writes()
        if version == self._data_version:
            return
        self._head = self._counter("resource_version")
        self._compacted = self._counter("compacted_through")
        self._tail.reset(self._head)
        self._data_version = version

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One read transaction, so rows and the counter come from the same snapshot even when
        # another process writes to the file.
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    def _counter(self, name: str) -> int:
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0])

    def _counter_locked(self, name: str) -> int:
        with self._lock:
            return self._counter(name)

    def _find(self, info: KindInfo, ns: str, name: str) -> Json | None:
        row = self._db.execute(
            "SELECT body FROM objects WHERE kind = ? AND namespace = ? AND name = ?", (info.kind, ns, name)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def _next_version(self) -> int:
        row = self._db.execute(
            "UPDATE counters SET value = value + 1 WHERE name = 'resource_version' RETURNING value"
        ).fetchone()
        self._head = int(row[0])
        return self._head

    def _create_locked(self, info: KindInfo, data: Json) -> Resource:
        meta = data["metadata"]
        ns, name = namespace_of(info, meta.get("namespace")), meta["name"]
        if meta.get("resourceVersion"):
            raise ValidationError(
                "must not be set when creating an object",
                obj=describe(info, ns, name),
                field="metadata.resourceVersion",
            )
        if self._find(info, ns, name) is not None:
            raise ConflictError("already exists", obj=describe(info, ns, name))
        version = self._next_version()
        meta.update(
            uid=meta.get("uid") or new_uid(),
            resourceVersion=str(version),
            generation=1,
            creationTimestamp=self._clock(),
        )
        meta.pop("deletionTimestamp", None)
        if "status" in info.model.model_fields:
            data.pop("status", None)  # status is written through update_status, as in Kubernetes
        created = load(info, data)
        self._record(info, ns, name, "ADDED", version, created.to_dict(reveal_secrets=True))
        return created

    def _change_locked(
        self, info: KindInfo, ns: str, name: str, current: Json, changed: Json, *, remove: bool = False
    ) -> Resource:
        if not remove and changed == current:
            return load(info, current)  # nothing changed: no new version, no event
        meta = changed["metadata"]
        if not remove and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            remove = True  # the last finalizer went: the deletion completes
        version = self._next_version()
        meta["resourceVersion"] = str(version)
        result = load(info, changed)
        self._record(
            info, ns, name, "DELETED" if remove else "MODIFIED", version, result.to_dict(reveal_secrets=True)
        )
        return result

    def _record(self, info: KindInfo, ns: str, name: str, event: EventType, version: int, data: Json) -> None:
        body = json.dumps(data, separators=(",", ":"))
        if event == "DELETED":
            self._db.execute(
                "DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?", (info.kind, ns, name)
            )
        else:
            self._db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?)", (info.kind, ns, name, version, body)
            )
        self._db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", (version, event, info.kind, ns, name, body)
        )
        self._tail.pending.append(TailEvent(version, event, info.kind, ns, body))
        if version % COMPACT_EVERY == 0:
            self._compact_locked(self._retention)

    def _compact_locked(self, keep: int) -> int:
        floor = max(self._counter("compacted_through"), self._counter("resource_version") - max(keep, 0))
        self._db.execute("DELETE FROM events WHERE resource_version <= ?", (floor,))
        self._db.execute("UPDATE counters SET value = ? WHERE name = 'compacted_through'", (floor,))
        self._compacted = floor
        return floor

    def _read_events(
        self, since: int, kinds: Sequence[str] | None, namespace: str | None, limit: int | None
    ) -> tuple[builtins.list[WatchEvent], int]:
        # While no other connection has committed, the events after `since` are in the tail
        # (eventtail's docstring); else, or when `since` is older than the tail, SQLite answers.
        tail: builtins.list[TailEvent] | None = None
        with self._lock:
            known = self._data_version is not None and self._tail.covers(since)
            if known and self._foreign_writes() == self._data_version:
                if since < self._compacted:
                    raise gone(since, self._compacted)
                tail = self._tail.after(since, kinds, namespace, limit)
                head = self._head
        if tail is not None:
            return self._parse((e.version, e.type, e.kind, e.body) for e in tail), head
        query = "SELECT resource_version, type, kind, body FROM events WHERE resource_version > ?"
        params: builtins.list[Any] = [since]
        if kinds:
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            params.extend(kinds)
        if namespace is not None:
            query += " AND namespace = ?"
            params.append(namespace)
        query += " ORDER BY resource_version"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        with self._read() as db:
            compacted = self._counter("compacted_through")
            head = self._counter("resource_version")
            if since < compacted:
                raise gone(since, compacted)
            rows = db.execute(query, params).fetchall()
        return self._parse(rows), head

    def _parse(self, rows: Iterable[tuple[int, EventType, str, str]]) -> builtins.list[WatchEvent]:
        """Events from stored rows, each parsed once per process (the latest `PARSED_EVENTS`)."""
        events = []
        for version, event, kind, body in rows:
            with self._parsed_lock:
                parsed = self._parsed.get(version)
            if parsed is None:
                # From the JSON text in one pass (pydantic's parser): a third cheaper than
                # json.loads and validating the dict, and the same object.
                obj = kind_of(kind).model.model_validate_json(body, context=STORED)
                parsed = WatchEvent(type=event, object=obj, resource_version=version)
                with self._parsed_lock:
                    self._parsed[version] = parsed
                    if len(self._parsed) > PARSED_EVENTS:
                        self._parsed.popitem(last=False)
            events.append(parsed)
        return events

    def _wait_for_change(self, after: int, timeout: float, stop: Callable[[], bool]) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._head > after or stop(), timeout)

    def _wake_watchers(self) -> None:
        with self._changed:
            self._changed.notify_all()


def _label_filters(selector: LabelSelector) -> builtins.list[tuple[str, builtins.list[str]]]:
    """SQL conditions for the selector's positive clauses (`key=value`, `key in (...)`), so that a
    list by owner label (a job's pods among thousands in its namespace) parses only the rows that
    can match; the selector is still applied to every row read, so this only narrows the reading."""
    filters = []
    for requirement in selector.requirements:
        if requirement.operator not in ("=", "in") or not _SQL_SAFE_KEY.fullmatch(requirement.key):
            continue
        values = sorted(requirement.values)
        marks = ",".join("?" * len(values))
        path = f'$.metadata.labels."{requirement.key}"'
        filters.append((f" AND json_extract(body, '{path}') IN ({marks})", values))
    return filters


_SQL_SAFE_KEY = re.compile(r"[A-Za-z0-9._/-]+")
"""Label keys that can be written into a JSON path as they are (every valid key; a selector's key
with other characters is left to the Python match)."""


if TYPE_CHECKING:  # mypy proves that SqliteStore implements the Store protocol

    def _implements_store(store: SqliteStore) -> Store:
        return store
