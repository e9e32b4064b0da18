"""A reader's next batch of events and how far it may move its cursor.

A reader that asks for some kinds only (the controller manager, the views, the twin, the simulator's
recorder) used to move its cursor to the last event it got: every later entry of other kinds was
scanned again on each read until one of its kinds came (with checkpoints every few minutes, a fifth
of a simulation's time). A store that can say how far a read went (`PagedEvents`: the in-memory
store, which answers from its log under one lock) lets the reader's cursor pass them; any other store
moves it as before, to the last event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpufleet.store.protocol import Store, WatchEvent


@runtime_checkable
class PagedEvents(Protocol):
    def events_page(
        self, resource_version: str | int, *, kinds: Sequence[str] | None = None, limit: int | None = None
    ) -> tuple[list[WatchEvent], int]:
        """Events after `resource_version` of `kinds`, at most `limit`, and the version up to which
        every entry was looked at (the last event's where `limit` cut the read)."""
        ...


class EventPages:
    """Reads a store's events page by page for one reader; whether the store can say how far a read
    went is found once (a runtime-checkable protocol's isinstance is slow, and reads are many)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._paged = store if isinstance(store, PagedEvents) else None

    def read(
        self, cursor: str | int, *, kinds: Sequence[str] | None, limit: int
    ) -> tuple[list[WatchEvent], str]:
        """The events after `cursor` of `kinds` (at most `limit`) and the reader's next cursor."""
        if self._paged is not None:
            events, reached = self._paged.events_page(cursor, kinds=kinds, limit=limit)
            return events, str(reached)
        events = self.store.events_since(cursor, kinds=kinds, limit=limit)
        return events, str(events[-1].resource_version) if events else str(cursor)
