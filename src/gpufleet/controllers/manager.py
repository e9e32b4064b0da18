"""The controller manager: feeds store changes to controllers and runs them when due (kopf's reactor).

Controllers are level-triggered: each event only says *which* object to look at again; what to do is
decided from the current state in the store. So after a restart, or when the store's event log was
compacted past the manager's cursor (`GoneError`), listing everything again is always correct.

The manager is a participant of the runtime driver: `step(now)` handles the store's new events, runs
what is due, and returns when it next wants to run. It reads no clock of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from gpufleet.api.errors import ConflictError, GoneError, GpuFleetError, NotFoundError
from gpufleet.controllers.failures import contained
from gpufleet.store.eventpage import EventPages
from gpufleet.store.protocol import Store, WatchEvent

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace or '', name) of an object of a controller's primary kind."""

BATCH = 2000
RETRY_SECONDS = 5.0
"""How long after a contained failure (`controllers.failures`) the object or controller is tried again."""


class Controller(Protocol):
    name: str
    kinds: tuple[str, ...]
    """Kinds whose events the controller receives."""

    def resync(self, now: float) -> None:
        """Looks at everything again (start, restart, or after events were lost)."""
        ...

    def observe(self, event: WatchEvent, now: float) -> None: ...

    def step(self, now: float) -> float | None:
        """Does what is due; returns the next time it wants to run (None: on the next change)."""
        ...


@runtime_checkable
class FollowsDispatch(Protocol):
    """A controller that wants to know how far the manager's reads of the event log went."""

    def dispatched(self, version: int) -> None:
        """Every event of the controller's kinds up to `version` was handed to it."""
        ...


@runtime_checkable
class Flushable(Protocol):
    """A controller that holds writes back until the manager is flushed."""

    def flush(self, now: float) -> None: ...


class Reconciler:
    """A keyed work queue: events map to keys of the primary kind, `reconcile(key)` runs once per key.

    Subclasses set `name`, `kinds`, `primary` and implement `keys_for` and `reconcile`; `reconcile`
    returns seconds after which to look again (None: only on the next change).
    """

    name = "reconciler"
    kinds: tuple[str, ...] = ()
    primary = ""
    retry_seconds = RETRY_SECONDS
    contained_failures = 0
    """Reconciles that raised an error that is no user's (a bug, or a value no check foresaw)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.due: dict[Key, float] = {}

    def keys_for(self, event: WatchEvent) -> Iterable[Key]:
        obj = event.object
        if obj.kind == self.primary:
            return [(obj.namespace or "", obj.name)]
        return []

    def reconcile(self, key: Key, now: float) -> float | None:
        raise NotImplementedError

    def resync(self, now: float) -> None:
        for obj in self.store.list(self.primary):
            self.enqueue((obj.namespace or "", obj.name), now)

    def observe(self, event: WatchEvent, now: float) -> None:
        for key in self.keys_for(event):
            self.enqueue(key, now)

    def enqueue(self, key: Key, at: float) -> None:
        current = self.due.get(key)
        if current is None or at < current:
            self.due[key] = at

    def step(self, now: float) -> float | None:
        if not self.due:
            return None  # most steps of most controllers: nothing is due, nothing waits
        soonest = min(self.due.values())
        if soonest > now:
            return soonest  # what waits is a later look (a periodic status), not due in this step
        ready = sorted(key for key, at in self.due.items() if at <= now)
        for key in ready:
            del self.due[key]
            try:
                after = self.reconcile(key, now)
            except ConflictError:
                after = 0.0  # someone wrote first: look again at the new state
            except NotFoundError:
                after = None
            except GpuFleetError as exc:
                log.warning("%s: %s/%s: %s", self.name, key[0], key[1], exc)
                after = self.retry_seconds
            except Exception:
                # Met on one object, it must not stop the others (nor the controllers after this one
                # in the round): logged with its traceback and looked at again later, as
                # controller-runtime does with a reconcile's error.
                self.contained_failures += 1
                contained(self.name, "%s/%s: reconcile failed", key[0], key[1])
                after = self.retry_seconds
            if after is not None:
                self.enqueue(key, now + max(after, 0.0) if after > 0 else now + 1e-3)
        return min(self.due.values(), default=None)


class ControllerManager:
    """Runs controllers from the store's event log; a participant of `gpufleet.twin.driver.Runtime`."""

    def __init__(self, store: Store, controllers: Sequence[Controller]) -> None:
        self.store = store
        self.controllers = list(controllers)
        self.kinds = sorted({kind for c in self.controllers for kind in c.kinds})
        self.by_kind = {kind: [c for c in self.controllers if kind in c.kinds] for kind in self.kinds}
        """Per kind, the controllers that receive its events, in the controllers' order."""
        self.cursor: str | None = None
        self.pages = EventPages(store)
        self.held = False
        """Whether a runtime steps the manager until it is quiet: then held writes wait for a step in
        which nothing else was written (else each step ends with them)."""
        # Found once: a runtime-checkable protocol's isinstance is slow, and flushes are many.
        self.flushable = [c for c in self.controllers if isinstance(c, Flushable)]
        self.following = [c for c in self.controllers if isinstance(c, FollowsDispatch)]
        self.failed_steps = 0
        """A controller's step or observe that raised (the controller then starts again from a listing)."""
        self.resting: dict[str, float] = {}
        """Controllers whose step or observe raised, with when they are stepped again."""

    @property
    def contained_failures(self) -> int:
        """Errors no user caused that the control plane met and contained (`controllers.failures`):
        its controllers' (a `Reconciler`'s failed reconciles, the scheduler's workloads left out) and
        its own (a controller's step or observe that raised)."""
        counted = sum(getattr(controller, "contained_failures", 0) for controller in self.controllers)
        return counted + self.failed_steps

    def hold_until_settled(self) -> None:
        self.held = True

    def flush(self, now: float) -> None:
        """Has each controller write what it held back (`controllers.heldstatus`)."""
        for controller in self.flushable:
            controller.flush(now)

    def _resync(self, now: float) -> None:
        self.cursor = self.store.resource_version
        for controller in self.controllers:
            controller.resync(now)

    def step(self, now: float) -> float | None:
        if self.cursor is None:
            self._resync(now)
        before = self._own_writes()
        self._dispatch(now)
        wakes = []
        resting = self.resting
        for controller in self.controllers:
            if resting and resting.get(controller.name, now) > now:
                wakes.append(resting[controller.name])
                continue
            try:
                wake = controller.step(now)
            except Exception:
                wake = self._contain(controller, "step", now)
            if wake is not None:
                wakes.append(wake)
        # A store that cannot count this thread's writes (none of ours) gets the held writes each step.
        if not self.held or before is None or self._own_writes() == before:
            self.flush(now)
        return min(wakes, default=None)

    def _own_writes(self) -> int | None:
        """The writes this thread has made to the store (`writes_by_this_thread`), where it counts."""
        counter = getattr(self.store, "writes_by_this_thread", None)
        return int(counter()) if counter is not None else None

    def _dispatch(self, now: float) -> None:
        assert self.cursor is not None
        while True:
            try:
                events, reached = self.pages.read(self.cursor, kinds=self.kinds, limit=BATCH)
            except GoneError:
                log.warning("event log compacted past %s; listing everything again", self.cursor)
                self._resync(now)
                continue
            for event in events:
                for controller in self.by_kind.get(event.object.kind, ()):
                    try:
                        controller.observe(event, now)
                    except Exception:
                        self._contain(controller, f"observe of {event.object.describe()}", now)
            self.cursor = reached
            for follower in self.following:
                follower.dispatched(int(reached))
            if len(events) < BATCH:
                return

    def _contain(self, controller: Controller, what: str, now: float) -> float:
        """A controller raised outside any one object's reconcile: the others in the round go on, and
        this one starts again from a full listing (its own state may be half-changed), after a delay
        so that a failure that comes back does not spin. Returns when to step it again."""
        self.failed_steps += 1
        contained(controller.name, "%s failed; it lists everything again in %gs", what, RETRY_SECONDS)
        try:
            controller.resync(now)
        except Exception:
            self.failed_steps += 1
            contained(controller.name, "resync failed too")
        self.resting[controller.name] = now + RETRY_SECONDS
        return now + RETRY_SECONDS
