"""A controller's cache of stored objects: listed once, then fed by the store's events.

The pool and TrainingJob controllers keep what they read this way (`poolview`, `jobview`) instead of
listing the store on every reconcile. A view applies each event once, whether it came through the
manager or through `catch_up` (the store's event log read up to now before a reconcile, so that the
reconcile sees what other controllers wrote earlier in the same round); a log compacted past the
view's cursor means listing again. A subclass says which kinds it follows, how it loads them from a
list, and how it takes one changed object.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Generic, TypeVar

from gpufleet.api.errors import GoneError
from gpufleet.controllers.manager import Reconciler
from gpufleet.store.eventpage import EventPages
from gpufleet.store.protocol import Store, WatchEvent

CATCH_UP_BATCH = 2000
"""Events read from the log per query while catching up."""


class EventFedView:
    """The cursor, the relist and the catch-up every event-fed view shares."""

    KINDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cursor: int | None = None
        """The newest version up to which every event of the kinds followed was applied (None: not
        listed yet)."""
        self.pages = EventPages(store)

    def relist(self) -> None:
        """Lists every kind again; the events after the version read first are applied on top, so
        nothing written meanwhile is missed (applying an event twice is harmless)."""
        head = int(self.store.resource_version)
        self._load()
        self.cursor = head

    def apply(self, event: WatchEvent) -> bool:
        """Applies one event unless already applied; True if it was new."""
        if self.cursor is None:
            self.relist()
        assert self.cursor is not None
        if event.resource_version <= self.cursor:
            return False
        self.cursor = event.resource_version
        self._take(event.object, deleted=event.type == "DELETED")
        return True

    def catch_up(self) -> list[WatchEvent]:
        """Applies the store's events the view has not seen yet; returns them (the caller enqueues
        their keys). A log compacted past the cursor means listing again."""
        if self.cursor is None:
            self.relist()
            return []
        fresh: list[WatchEvent] = []
        while True:
            assert self.cursor is not None
            try:
                events, reached = self.pages.read(self.cursor, kinds=self.KINDS, limit=CATCH_UP_BATCH)
            except GoneError:
                self.relist()
                return fresh
            fresh += [event for event in events if self.apply(event)]
            # Every entry up to `reached` was looked at: none of the kinds followed is left behind it.
            self.cursor = max(self.cursor, int(reached))
            if len(events) < CATCH_UP_BATCH:
                return fresh

    def _load(self) -> None:
        """Replaces everything held with a fresh list of the kinds followed."""
        raise NotImplementedError

    def _take(self, obj: Any, *, deleted: bool) -> None:
        """Takes in one changed (or deleted) object."""
        raise NotImplementedError


View = TypeVar("View", bound=EventFedView)


class ViewedReconciler(Reconciler, Generic[View]):
    """A reconciler that reads its view instead of the store: the view is listed again on a resync,
    takes each event once, and is caught up at the start of a reconcile (`catch_up`)."""

    view: View

    def resync(self, now: float) -> None:
        self.view.relist()
        super().resync(now)

    def observe(self, event: WatchEvent, now: float) -> None:
        # An event a catch-up already applied had its keys enqueued then.
        if self.view.apply(event):
            super().observe(event, now)

    @functools.cached_property
    def _view_fed_whole(self) -> bool:
        """Whether the view follows none but the controller's kinds, all of which the manager hands it."""
        return set(self.view.KINDS) <= set(self.kinds)

    def dispatched(self, version: int) -> None:
        """The manager handed this controller every event of its kinds up to `version`: a view that
        follows none but those has applied every event of its own kinds too, so its cursor moves there.
        Else it stayed at the last event of its kinds, and a log compacted past that (the simulator
        compacts after every settle) made the next catch-up list everything again."""
        view = self.view
        if view.cursor is not None and version > view.cursor and self._view_fed_whole:
            view.cursor = version

    def catch_up(self, now: float) -> None:
        """Brings the view up to what was written since the manager's last dispatch, and enqueues the
        keys those writes concern."""
        for event in self.view.catch_up():
            for later in self.keys_for(event):
                self.enqueue(later, now)
