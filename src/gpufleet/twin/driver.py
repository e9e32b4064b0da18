"""The runtime driver: moves one clock and lets every participant (the twin, the controllers) act.

A participant is anything with `step(now) -> next wake-up`: it handles what the store changed since its
last step and what is due, and says when it next wants to run (None: only when the store changes).
The twin never imports the controllers; whoever wires the control plane (the CLI, a test, the
simulator) hands both to one `Runtime`.

At each instant the participants are stepped round after round until a round in which they wrote
nothing and no one is due: then, on a virtual clock, time jumps to the earliest wake-up; on the wall
clock the driver sleeps until then (waking at least every `poll_seconds` to see writes made by the
HTTP API). A participant that may hold writes back until a step of its own finds nothing else to
write (`Settling`: status writes that would otherwise be made once per hand-off at one instant) is
told so when the runtime is built: the runtime steps it again after any round with writes, so such a
quiet step comes before the instant ends, and what it writes then the others see in one more round.
Only the participants' own writes (those of the driver's thread) count: the HTTP API writes from
other threads meanwhile, and a steady stream of its writes (a client deleting thousands of objects
one by one) must not look like participants chasing each other. What it wrote is seen at the next
round or the next settle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpufleet.twin.clock import Clock, VirtualClock

log = logging.getLogger(__name__)

MAX_ROUNDS = 200
"""Rounds at one instant before the driver decides the participants are chasing each other."""


class Participant(Protocol):
    def step(self, now: float) -> float | None: ...


@runtime_checkable
class Settling(Protocol):
    """A participant that can hold back writes made several times at one instant (an object's status
    as each hand-off of the instant moves it) and make them once, when nothing else is left to do."""

    def hold_until_settled(self) -> None:
        """From now on, a runtime steps this participant until its steps are quiet: writes may be held
        until a step that has nothing else to write (without a runtime, each step made them)."""
        ...


class CountsWrites(Protocol):
    """The store the participants write to, as far as the driver needs it (`SqliteStore` is one)."""

    def writes_by_this_thread(self) -> int:
        """Changes the calling thread has committed so far."""
        ...


class LivelockError(RuntimeError):
    """The participants kept changing the store at one instant without settling."""


class Runtime:
    """Drives participants on one clock against one store."""

    def __init__(
        self,
        store: CountsWrites,
        *,
        clock: Clock,
        participants: Sequence[Participant],
        poll_seconds: float = 0.2,
    ) -> None:
        self.store = store
        self.clock = clock
        self.participants = list(participants)
        self.poll_seconds = poll_seconds
        for participant in self.participants:
            if isinstance(participant, Settling):
                participant.hold_until_settled()

    def settle(self) -> float | None:
        """Steps every participant until they change nothing at this instant; returns the next wake-up.

        A round counts as quiet when the participants wrote nothing in it, whatever other threads (the
        HTTP API) wrote meanwhile: the participants see those writes at their next step.
        """
        now = self.clock.now()
        for _ in range(MAX_ROUNDS):
            before = self.store.writes_by_this_thread()
            wakes = [p.step(now) for p in self.participants]
            due = [w for w in wakes if w is not None]
            if self.store.writes_by_this_thread() == before and all(w > now for w in due):
                return min(due) if due else None
        raise LivelockError(f"participants did not settle at t={now} after {MAX_ROUNDS} rounds")

    # ------------------------------------------------------------------- virtual time
    def run_until(self, end: float) -> None:
        """Virtual clock only: runs every event up to `end`, then leaves the clock at `end`."""
        clock = self._virtual()
        while True:
            wake = self.settle()
            if wake is None or wake > end:
                break
            clock.advance_to(max(wake, clock.now()))
        if end > clock.now():
            clock.advance_to(end)
            self.settle()

    def run_for(self, seconds: float) -> None:
        self.run_until(self.clock.now() + seconds)

    def run_while(self, condition: object, *, limit: float) -> bool:
        """Runs until `condition()` is false or `limit` seconds have passed; True if it became false."""
        assert callable(condition)
        clock = self._virtual()
        end = clock.now() + limit
        while True:
            wake = self.settle()
            if not condition():
                return True
            if wake is None or wake > end:
                clock.advance_to(end)
                self.settle()
                return not condition()
            clock.advance_to(max(wake, clock.now()))

    def _virtual(self) -> VirtualClock:
        if not isinstance(self.clock, VirtualClock):
            raise TypeError("run_until needs a VirtualClock; use serve() on the wall clock")
        return self.clock

    # ---------------------------------------------------------------------- wall time
    def serve(self, stop: threading.Event) -> None:
        """Wall clock: runs until `stop` is set. Errors of one round are logged and the loop goes on."""
        while not stop.is_set():
            try:
                wake = self.settle()
            except Exception:  # a bad round must not stop the control plane
                log.exception("runtime round failed")
                wake = None
            delay = self.poll_seconds if wake is None else min(self.poll_seconds, wake - self.clock.now())
            stop.wait(max(delay, 0.0))

    def start(self, stop: threading.Event) -> threading.Thread:
        """`serve` in a daemon thread (what `gpufleet up` runs next to the HTTP server)."""
        thread = threading.Thread(target=self.serve, args=(stop,), name="gpufleet-runtime", daemon=True)
        thread.start()
        return thread
