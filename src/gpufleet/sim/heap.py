"""The simulator's long-lived objects kept out of Python's cyclic garbage collector.

A simulation's heap only grows (the store's objects and event log, the views, the recorder's
measurements) and almost none of it ever becomes cyclic garbage: refcounting frees what the control
plane lets go. Yet CPython walks the whole heap in a full collection each time the objects promoted
since the last one reach a quarter of it, so the collector's share grows with the run: 7 days of the
Philly trace on 2,048 GPUs spent 28% of their CPU in it, three quarters of that in full collections
that found about 250 objects in all.

`FrozenHeap` moves what is alive to the collector's permanent generation (`gc.freeze`) every
`every` settles, after a young collection: frozen objects are never walked again, refcounting still
frees them, and the automatic collections keep looking at what came after the last freeze. The
price is that a cycle among frozen objects that becomes garbage waits for the run's end, when the
heap is unfrozen and the collector sees it again.
"""

from __future__ import annotations

import gc
from types import TracebackType

FREEZE_EVERY = 512
"""Settles between two freezes (day 1 of the Philly trace takes about 2,700)."""


class FrozenHeap:
    """A context manager around a run; `tick()` once per settle."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        if every < 1:
            raise ValueError(f"FrozenHeap: every must be at least 1, got {every}")
        self.every = every
        self.ticks = 0
        self.freezes = 0
        self._owner = False

    def __enter__(self) -> FrozenHeap:
        # Objects someone else froze before the run stay frozen: unfreezing at its end would release
        # theirs too, so the run then leaves its own frozen as well.
        self._owner = gc.get_freeze_count() == 0
        self.freeze()
        return self

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % self.every == 0:
            self.freeze()

    def freeze(self) -> None:
        # A young collection first, so that the cycles that died since the last one are not frozen;
        # it walks only the two young generations, never the frozen heap.
        gc.collect(1)
        gc.freeze()
        self.freezes += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._owner:
            gc.unfreeze()
