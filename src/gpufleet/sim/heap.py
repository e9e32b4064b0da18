"""The simulator's heap kept away from Python's cyclic garbage collector.

A simulation's heap only grows (the store's objects and event log, the views, the recorder's
measurements) and almost none of it ever becomes cyclic garbage: refcounting frees what the control
plane lets go. Yet CPython walks the whole heap in a full collection each time the objects promoted
since the last one reach a quarter of it, so the collector's share grows with the run: 7 days of the
Philly trace on 2,048 GPUs spent 28% of their CPU in it (9.3 s in full collections that found 258
objects), and its young collections, which walk every object that lives past a few hundred
allocations, took another 8% to find about 2,000.

`FrozenHeap` turns the automatic collector off for the run and, every `every` settles, collects what
is not frozen yet (the objects since the last freeze: cycles among them that died are freed) and
freezes what is left (`gc.freeze`): frozen objects are never walked again, and refcounting frees
them as before. The cyclic garbage a run holds is what the last `every` settles made, plus cycles
among frozen objects that died since: for the 7 days above, about 300 objects in all, freed when the
run ends and the collector comes back.
"""

from __future__ import annotations

import gc
from types import TracebackType

FREEZE_EVERY = 65_536
"""Settles between two collections. Each walks every object made since the last one that is still
alive (when this was measured, most of them the event log's, then kept for 200,000 events; the
in-memory log is now emptied after every settle), so a collection every 4,096 settles cost 7 days on
2,048 GPUs (about 16,000 settles) as much as the young collections it replaces; the whole Philly
trace takes about 250,000 settles."""


class FrozenHeap:
    """A context manager around a run; `tick()` once per settle."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        if every < 1:
            raise ValueError(f"FrozenHeap: every must be at least 1, got {every}")
        self.every = every
        self.ticks = 0
        self.freezes = 0
        self._owner = False
        self._enabled = False

    def __enter__(self) -> FrozenHeap:
        # Objects someone else froze before the run stay frozen: unfreezing at its end would release
        # theirs too, so the run then leaves its own frozen as well.
        self._owner = gc.get_freeze_count() == 0
        self._enabled = gc.isenabled()
        gc.disable()
        self.freeze()
        return self

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % self.every == 0:
            self.freeze()

    def freeze(self) -> None:
        # A full collection walks every generation but the permanent one: only what the run made
        # since the last freeze.
        gc.collect()
        gc.freeze()
        self.freezes += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._owner:
            gc.unfreeze()
        if self._enabled:
            gc.enable()
