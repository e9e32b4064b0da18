"""The latest events a SqliteStore's own connection committed, kept in memory for its readers.

Every watcher of a process (each controller, its views, the twin, the simulator's recorder) asks the
store for the events since its cursor several times per settle round; most of those reads find one
or two new events, or none. Answering each from SQLite took a read transaction, two counter reads
and a query (five statements): a seventh of a simulation's CPU. While no other connection has
committed to the file (SQLite's `PRAGMA data_version` says so in one statement), the events after a
reader's cursor are exactly those this connection committed since the tail was last made complete,
and are answered from here.

The tail holds consecutive versions only: a write transaction holds SQLite's write lock, so the
versions it takes follow the last one committed, and a rolled-back transaction gives its versions
back (the counter is rolled back with it). A commit by another connection makes the tail useless
until the next write transaction starts it again from the current head (`reset`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.store.protocol import EventType


@dataclass(frozen=True, slots=True)
class TailEvent:
    """One committed event as stored: its version, type, kind, namespace and JSON body."""

    version: int
    type: EventType
    kind: str
    namespace: str
    body: str


class EventTail:
    """Events `start + 1 ..` in version order, the newest `size` of them; `pending` holds those of the
    transaction in progress until it commits."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("an event tail holds at least one event")
        self._events: deque[TailEvent] = deque(maxlen=size)
        self.start = 0
        """The version the tail follows: it holds every committed event after `start` (the oldest
        ones fall out when it is full, moving `start`)."""
        self.pending: list[TailEvent] = []

    def reset(self, head: int) -> None:
        """Empty, and complete from `head` on (the head as another connection may have moved it)."""
        self._events.clear()
        self.pending.clear()
        self.start = head

    def commit(self) -> None:
        """The transaction's events are committed: they join the tail."""
        for event in self.pending:
            if len(self._events) == self._events.maxlen:
                self.start = self._events[0].version
            self._events.append(event)
        self.pending.clear()

    def covers(self, since: int) -> bool:
        """Whether every committed event after `since` is here (as far as this connection knows)."""
        return since >= self.start

    def after(
        self, since: int, kinds: Sequence[str] | None, namespace: str | None, limit: int | None
    ) -> list[TailEvent]:
        """The events after `since` of those kinds and namespace, oldest first, at most `limit`."""
        events = self._events
        first = since - self.start  # versions are consecutive from start + 1: the index of since + 1
        wanted = set(kinds) if kinds else None
        out: list[TailEvent] = []
        for index in range(max(first, 0), len(events)):
            event = events[index]
            if wanted is not None and event.kind not in wanted:
                continue
            if namespace is not None and event.namespace != namespace:
                continue
            out.append(event)
            if limit is not None and len(out) >= limit:
                break
        return out
