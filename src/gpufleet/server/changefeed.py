"""The store's change log, followed by one thread and handed to every watch and long poll.

A watch or a long poll that waits in a worker thread holds that thread for as long as it waits (up
to 600 s), so a few dozen idle ones take every thread of the server and freeze it. Here they are
coroutines on the event loop that wait on this feed instead: one thread follows the store's log for
the whole server (a `Store.watch` of every kind), keeps the newest events in memory, each already
written as its watch line, and wakes the coroutines whose kinds and namespace an event matches. A
coroutine further behind than the memory reaches reads the store itself (see `watches`).

The thread runs while anyone waits: the first waiter starts it, and it stops once nobody has waited
for a round (`ROUND_SECONDS`); its memory starts empty each time.

Coroutines may run on several event loops (a test client runs one per request); each loop with
waiters has a `_Hub` that the thread wakes with `call_soon_threadsafe`, once per burst of events and
at most once every `FLUSH_SECONDS` while events keep coming.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from anyio import to_thread

from gpufleet.api.errors import GoneError
from gpufleet.api.resource import Resource
from gpufleet.store.protocol import Store, WatchEvent

log = logging.getLogger("gpufleet.server")

KEEP = 1024
"""Events kept in memory (between KEEP and twice as many): a watch this close behind reads no store."""
ROUND_SECONDS = 5.0
"""How long the thread waits for events before it looks whether anyone still waits."""
START_SECONDS = 30.0
FLUSH_SECONDS = 0.02
"""Waiters of a loop are woken at most this often while events keep coming (see `_flush_when_due`)."""
IDLE_CHECK_SECONDS = 1.0
"""How often the thread, busy publishing, looks whether anyone still waits."""
FALLBACK_SECONDS = 0.5
"""Without a thread following the log (it could not start), waiters poll the store this often."""

Key = tuple[str | None, str | None]
"""(kind, namespace) of an event, or what a waiter waits for; None: any."""


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """An event of the log with its line of a watch stream, written once for every watcher."""

    resource_version: int
    type: str
    object: Resource
    line: bytes

    @classmethod
    def of(cls, event: WatchEvent) -> FeedEvent:
        data = {"type": event.type, "object": event.object.to_dict()}
        return cls(event.resource_version, event.type, event.object, json.dumps(data).encode() + b"\n")

    @property
    def key(self) -> Key:
        return (self.object.kind, self.object.namespace)


@dataclass(frozen=True, slots=True)
class Interest:
    """The events a waiter wants: of these kinds (None: any) in this namespace (None: any)."""

    kinds: frozenset[str] | None
    namespace: str | None

    def matches(self, event: FeedEvent) -> bool:
        obj = event.object
        return (self.kinds is None or obj.kind in self.kinds) and (
            self.namespace is None or obj.namespace == self.namespace
        )

    def keys(self) -> list[Key]:
        kinds: Iterable[str | None] = sorted(self.kinds) if self.kinds is not None else (None,)
        return [(kind, self.namespace) for kind in kinds]


@dataclass(frozen=True, slots=True)
class Page:
    """Events after a cursor, and the cursor after them: every event up to it is in `events` or did
    not match."""

    events: list[FeedEvent]
    cursor: int


def _version(event: FeedEvent) -> int:
    return event.resource_version


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _tail(events: list[FeedEvent], after: int) -> list[FeedEvent]:
    return events[bisect.bisect_right(events, after, key=_version) :]


class _Memory:
    """The newest events in order, and the same events by kind and by kind and namespace, so that a
    waiter looks only at the events of its own kinds and namespace (hundreds of watches, each of one
    namespace, would otherwise each go through everyone's events at every wake-up)."""

    def __init__(self, events: list[FeedEvent] | None = None) -> None:
        self.events: list[FeedEvent] = []
        self._by_kind: dict[str, list[FeedEvent]] = {}
        self._by_key: dict[Key, list[FeedEvent]] = {}
        for event in events or ():
            self.add(event)

    def __len__(self) -> int:
        return len(self.events)

    def add(self, event: FeedEvent) -> None:
        self.events.append(event)
        self._by_kind.setdefault(event.object.kind, []).append(event)
        self._by_key.setdefault(event.key, []).append(event)

    def after(self, after: int, interest: Interest) -> list[FeedEvent]:
        """The events after `after` that match, in order."""
        sources = self._sources(interest)
        if sources is None:
            return [event for event in _tail(self.events, after) if interest.matches(event)]
        if len(sources) == 1:
            return _tail(sources[0], after)
        return sorted((event for source in sources for event in _tail(source, after)), key=_version)

    def has(self, after: int, interest: Interest) -> bool:
        sources = self._sources(interest)
        if sources is None:
            return any(interest.matches(event) for event in _tail(self.events, after))
        return any(source and source[-1].resource_version > after for source in sources)

    def _sources(self, interest: Interest) -> list[list[FeedEvent]] | None:
        """The lists that hold exactly the events of `interest`; None: filter them all."""
        if interest.kinds is None:
            return [self.events] if interest.namespace is None else None
        if interest.namespace is None:
            return [self._by_kind.get(kind, []) for kind in interest.kinds]
        return [self._by_key.get((kind, interest.namespace), []) for kind in interest.kinds]


class _Hub:
    """The waiters of one event loop, by the keys they wait for; changed under the feed's lock."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiters: dict[Key, set[asyncio.Future[None]]] = {}
        self.pending: set[Key] = set()
        self.everyone = False
        self.scheduled = False
        self.flushed = float("-inf")  # the loop's time of the last flush

    def add(self, keys: list[Key], future: asyncio.Future[None]) -> None:
        for key in keys:
            self.waiters.setdefault(key, set()).add(future)

    def remove(self, keys: list[Key], future: asyncio.Future[None]) -> None:
        for key in keys:
            futures = self.waiters.get(key)
            if futures is not None:
                futures.discard(future)
                if not futures:
                    del self.waiters[key]

    def note(self, key: Key | None) -> bool:
        """Records an event's key (None: wake everyone); True if the loop must be asked to flush."""
        if not self.waiters:
            return False  # a waiter that comes later finds the event in memory itself
        if key is None:
            self.everyone = True
        else:
            self.pending.add(key)
        if self.scheduled:
            return False
        self.scheduled = True
        return True

    def take(self) -> set[asyncio.Future[None]]:
        """The waiters the noted events concern; forgets the notes."""
        if self.everyone:
            woken = {future for futures in self.waiters.values() for future in futures}
        else:
            woken = set()
            for kind, namespace in self.pending:
                for key in ((kind, namespace), (kind, None), (None, namespace), (None, None)):
                    woken.update(self.waiters.get(key, ()))
        self.pending = set()
        self.everyone = False
        self.scheduled = False
        return woken


class ChangeFeed:
    """The newest events of `store`'s log in memory, and coroutines waiting for the next ones."""

    def __init__(self, store: Store, *, keep: int = KEEP, round_seconds: float = ROUND_SECONDS) -> None:
        self._store = store
        self._keep = keep
        self._round = round_seconds
        self._lock = threading.Lock()
        self._memory = _Memory()
        self._floor: int | None = None  # events after it are all in memory; None: nobody follows
        self._head = 0
        self._hubs: dict[asyncio.AbstractEventLoop, _Hub] = {}
        self._clients: Counter[str] = Counter()
        self._busy = time.monotonic()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failed = float("-inf")  # when a thread last failed to start

    # --------------------------------------------------------------------------------- clients

    @contextmanager
    def client(self, kind: str) -> Iterator[None]:
        """Counts an open watch or long poll (`kind` names which) while the block runs."""
        with self._lock:
            self._clients[kind] += 1
        try:
            yield
        finally:
            with self._lock:
                self._clients[kind] -= 1
                self._busy = time.monotonic()

    def clients(self, kind: str) -> int:
        """Open clients of a kind: what the server's stats show, and tests wait to fall to 0."""
        with self._lock:
            return self._clients[kind]

    @property
    def following(self) -> bool:
        """Whether a thread follows the log now."""
        with self._lock:
            return self._thread is not None

    # --------------------------------------------------------------------------------- reading

    def snapshot(self, after: int, interest: Interest) -> Page | None:
        """The events in memory after `after` that match; None when memory does not reach back to
        `after` (or nobody follows the log): read the store instead."""
        with self._lock:
            if self._floor is None or after < self._floor:
                return None
            return Page(self._memory.after(after, interest), max(after, self._head))

    async def wait(self, after: int, interest: Interest, timeout: float) -> None:
        """Returns once an event after `after` that matches is in memory, at once if memory does not
        reach back to `after` (read the store), or after `timeout` seconds.

        Waiters are counted clients (`client`): a thread stops only when there are none.
        """
        if timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        keys = interest.keys()
        # One pass under the lock, which the thread takes for every event it publishes: it starts
        # the thread if none follows the log, and registers the waiter unless it need not wait.
        with self._lock:
            self._busy = time.monotonic()
            if self._thread is None and self._busy - self._failed > FALLBACK_SECONDS:
                self._launch_locked()
            ready = self._ready
            if not ready.is_set():
                following = None
            elif self._floor is None:
                following = False
            elif after < self._floor or self._memory.has(after, interest):
                return
            else:
                following = True
                hub = self._hubs.get(loop) or self._hubs.setdefault(loop, _Hub(loop))
                hub.add(keys, future)
        if following is None:  # the thread is starting: look again once it has read the head
            await to_thread.run_sync(ready.wait, START_SECONDS)
            return
        if not following:
            await asyncio.sleep(min(timeout, FALLBACK_SECONDS))
            return
        # A timer that resolves the future itself: lighter than asyncio.wait_for, which wraps
        # every wait in a second future, and a watch waits once per burst of events.
        expiry = loop.call_later(timeout, _resolve, future)
        try:
            await future
        finally:
            expiry.cancel()
            with self._lock:
                hub.remove(keys, future)  # the hub stays, with when it last flushed

    # ---------------------------------------------------------------------------- the thread

    def _launch_locked(self) -> None:
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._follow, args=(self._ready,), name="gpufleet-changefeed", daemon=True
        )
        self._thread.start()

    def _follow(self, ready: threading.Event) -> None:
        cursor: int | None = None  # None: start again from the store's head
        try:
            cursor = self._restart()
        except Exception:
            log.exception("the change feed cannot read the store; watches poll it instead")
            with self._lock:
                self._thread = None
                self._failed = time.monotonic()  # not started again at once by every waiter
            return
        finally:
            ready.set()
        while not self._stop_if_idle():
            try:
                cursor = self._follow_round(self._restart() if cursor is None else cursor)
            except GoneError:
                log.warning("the change feed fell behind the store's log; watches behind it end")
                cursor = None
            except Exception:
                if self._stop_if_idle(grace=False):
                    return  # e.g. the store closed at shutdown, after its last waiter left
                log.exception("the change feed failed to read the store; trying again")
                time.sleep(FALLBACK_SECONDS)

    def _follow_round(self, cursor: int) -> int:
        """Publishes the events after `cursor` as they come, for one round; the cursor after them."""
        watch = self._store.watch(since=cursor, timeout=self._round)
        look = time.monotonic() + IDLE_CHECK_SECONDS
        try:
            for event in watch:
                self._publish(FeedEvent.of(event))
                cursor = event.resource_version
                if time.monotonic() > look:  # not at every event: the loop takes the lock too
                    if self._idle():
                        break
                    look = time.monotonic() + IDLE_CHECK_SECONDS
        finally:
            watch.close()
        return cursor

    def _restart(self) -> int:
        """Memory empty from the store's head on; waiters look again (those behind read the store)."""
        head = int(self._store.resource_version)
        with self._lock:
            self._memory = _Memory()
            self._floor = self._head = head
            hubs = [hub for hub in self._hubs.values() if hub.note(None)]
        self._schedule(hubs)
        return head

    def _idle(self) -> bool:
        with self._lock:
            return self._idle_locked()

    def _idle_locked(self, *, grace: bool = True) -> bool:
        if any(self._clients.values()):
            return False
        return not grace or time.monotonic() - self._busy > self._round

    def _stop_if_idle(self, *, grace: bool = True) -> bool:
        """Ends the thread's work if nobody waits (and, with `grace`, nobody waited for a round).
        Decided under the lock that `_start` takes, so a waiter either keeps this thread going or
        starts the next one."""
        with self._lock:
            if not self._idle_locked(grace=grace):
                return False
            self._thread = None
            self._floor = None
            self._memory = _Memory()
            hubs = [hub for hub in self._hubs.values() if hub.note(None)]
            self._hubs = {loop: hub for loop, hub in self._hubs.items() if hub.waiters}  # loops gone
        self._schedule(hubs)
        return True

    def _publish(self, event: FeedEvent) -> None:
        with self._lock:
            self._memory.add(event)
            self._head = event.resource_version
            if len(self._memory) > 2 * self._keep:  # rebuilt once every `keep` events
                kept = self._memory.events[-self._keep :]
                self._floor = kept[0].resource_version - 1
                self._memory = _Memory(kept)
            hubs = [hub for hub in self._hubs.values() if hub.note(event.key)]
        self._schedule(hubs)

    def _schedule(self, hubs: list[_Hub]) -> None:
        for hub in hubs:
            try:
                hub.loop.call_soon_threadsafe(self._flush_when_due, hub)
            except RuntimeError:  # the loop closed with waiters on it; they are gone with it
                with self._lock:
                    if self._hubs.get(hub.loop) is hub:
                        del self._hubs[hub.loop]

    def _flush_when_due(self, hub: _Hub) -> None:
        """On the hub's loop: flushes now, or `FLUSH_SECONDS` after the last flush. A lone event is
        passed on at once; under a stream of them each waiter wakes at most once a window, for all
        the events of the window, rather than once per event, which is what hundreds of watches of
        a busy kind would cost otherwise."""
        due = hub.flushed + FLUSH_SECONDS - hub.loop.time()
        if due > 0:
            hub.loop.call_later(due, self._flush, hub)
        else:
            self._flush(hub)

    def _flush(self, hub: _Hub) -> None:
        """On the hub's loop: wakes the waiters the events noted since the last flush concern."""
        hub.flushed = hub.loop.time()
        with self._lock:
            woken = hub.take()
        for future in woken:
            _resolve(future)
