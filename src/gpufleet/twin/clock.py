"""Clocks: the wall clock for a live control plane, a virtual one for tests and the simulator.

Time is seconds since the Unix epoch as a float everywhere in the runtime; `datetime` is only for what
is written into objects. A virtual clock starts at a fixed instant and moves only when told, so a day
of a fleet's life runs in seconds and every run is reproducible.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

VIRTUAL_EPOCH = datetime(2025, 1, 6, tzinfo=UTC).timestamp()
"""Where virtual clocks start by default: a Monday, 00:00 UTC."""


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...


def as_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def as_seconds(value: datetime) -> float:
    return value.timestamp()


class WallClock:
    """Real time."""

    def now(self) -> float:
        return time.time()

    def datetime(self) -> datetime:
        return as_datetime(self.now())


class VirtualClock:
    """Time that moves only forward and only by `advance_to`; what the event loop does in simulation."""

    def __init__(self, start: float = VIRTUAL_EPOCH) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def datetime(self) -> datetime:
        return as_datetime(self._now)

    def advance_to(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"a virtual clock cannot go back (now {self._now}, asked {when})")
        self._now = float(when)
