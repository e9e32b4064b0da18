"""The twin's event loop: SimPy's kernel in miniature, a heap of (time, priority, sequence, event).

The sequence number makes events at the same time and priority run in the order they were scheduled,
so a run is reproducible. The loop does not own time: `run_due(now)` runs what is due at the clock's
present, and the runtime decides how the clock moves (virtual: jump to the next event; wall: sleep).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

Action = Callable[[float], None]
"""What an event does; it receives the time it runs at."""


@dataclass(slots=True)
class Timer:
    """A scheduled event; `cancel()` makes it a no-op (it stays in the heap until its time)."""

    at: float
    name: str
    action: Action = field(repr=False)
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class EventLoop:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Timer]] = []
        self._seq = itertools.count()

    def schedule(self, *, at: float, action: Action, name: str = "", priority: int = 0) -> Timer:
        timer = Timer(at, name, action)
        heapq.heappush(self._heap, (at, priority, next(self._seq), timer))
        return timer

    def next_time(self) -> float | None:
        """When the next live event is due; None when nothing is scheduled."""
        while self._heap and self._heap[0][3].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def run_due(self, now: float) -> int:
        """Runs every event due at or before `now` (including those they schedule for now)."""
        ran = 0
        while self._heap and self._heap[0][0] <= now:
            _, _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            timer.cancelled = True
            timer.action(now)
            ran += 1
        return ran

    def __len__(self) -> int:
        return sum(1 for *_, t in self._heap if not t.cancelled)
