"""A watch over an embedded store's event log: both embedded stores (SQLite, memory) hand out this one.

A watch polls the log from its cursor in batches and, when it has caught up, waits for a writer's
wake-up (or `POLL_SECONDS`, so that writes another process made to a shared SQLite file are seen
too) until its timeout.
"""

from __future__ import annotations

import builtins
import time
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Protocol

from gpufleet.store.protocol import WatchEvent

POLL_SECONDS = 0.5


class EventLog(Protocol):
    """What a watch needs of its store."""

    def _read_events(
        self, since: int, kinds: Sequence[str] | None, namespace: str | None, limit: int | None
    ) -> tuple[builtins.list[WatchEvent], int]:
        """Events after `since` (oldest first, at most `limit`) and the store's head version."""
        ...

    def _wait_for_change(self, after: int, timeout: float, stop: Callable[[], bool]) -> None:
        """Returns once the head is past `after`, `stop()` holds, or `timeout` seconds have passed."""
        ...

    def _wake_watchers(self) -> None:
        """Wakes every watch waiting in `_wait_for_change` (it then checks its `stop`)."""
        ...


class LogWatch:
    """A watch on an embedded store: iterate for events; ends at its timeout, or when closed."""

    BATCH = 256

    def __init__(
        self,
        store: EventLog,
        *,
        kinds: Sequence[str] | None,
        namespace: str | None,
        since: int,
        timeout: float | None,
    ) -> None:
        self._store = store
        self._kinds = list(kinds) if kinds else None
        self._namespace = namespace
        self._cursor = since
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._buffer: deque[WatchEvent] = deque()
        self._closed = False

    @property
    def resource_version(self) -> str:
        if self._buffer:
            return str(self._buffer[0].resource_version - 1)
        return str(self._cursor)

    def __iter__(self) -> LogWatch:
        return self

    def __next__(self) -> WatchEvent:
        while True:
            if self._buffer:
                return self._buffer.popleft()
            if self._closed:
                raise StopIteration
            events, head = self._store._read_events(self._cursor, self._kinds, self._namespace, self.BATCH)
            if events:
                self._buffer.extend(events)
                full = len(events) == self.BATCH
                self._cursor = events[-1].resource_version if full else max(head, events[-1].resource_version)
                continue
            self._cursor = max(self._cursor, head)
            remaining = POLL_SECONDS if self._deadline is None else self._deadline - time.monotonic()
            if remaining <= 0:
                raise StopIteration
            self._store._wait_for_change(self._cursor, min(remaining, POLL_SECONDS), lambda: self._closed)

    def close(self) -> None:
        """Ends the watch; a thread blocked in `next()` returns promptly."""
        self._closed = True
        self._store._wake_watchers()

    def __enter__(self) -> LogWatch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
