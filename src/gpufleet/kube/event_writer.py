"""Events written apart from the binds they report, as kube-scheduler writes them.

kube-scheduler records its Events into a broadcaster with a buffer of 1,000 that drops what does not
fit, and one goroutine writes them to the API server one after the other; its binds never wait on
them. Here the same: a binding thread hands its `Scheduled` Event over and goes on to the next bind,
and one writer thread sends the Events in order. Under a burst of binds the Events trail behind them
instead of taking half of the binding threads' round trips, and past `CAPACITY` waiting Events the
newest is dropped (counted in `gpufleet_events_dropped_total`): an Event is best effort, a bind is not.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from gpufleet.observability import metrics

log = logging.getLogger(__name__)

CAPACITY = 10_000
"""Events waiting to be written before new ones are dropped. kube-scheduler's buffer holds 1,000, but
its writer keeps pace with binds that go out slower; here a burst of binds runs ahead of the one
writer, and its Events (a pod reference and a closure each) are kept rather than dropped."""


class EventWriter:
    """One thread writing handed-over Events in order; `put` never blocks."""

    def __init__(self, *, capacity: int = CAPACITY) -> None:
        self._todo: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, write: Callable[[], None]) -> bool:
        """Queues `write` (which writes one Event and never raises); False when it was dropped."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True, name="events")
                self._thread.start()
        try:
            self._todo.put_nowait(write)
        except queue.Full:
            self.dropped += 1
            metrics.EVENTS_DROPPED.inc()
            return False
        return True

    def close(self, *, wait: bool = True) -> None:
        """Stops the writer after the Events already queued (`wait`: and waits for them)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self._todo.put(None)  # after everything queued; blocks only while the queue is full
        if wait:
            thread.join()

    def _work(self) -> None:
        while (write := self._todo.get()) is not None:
            try:
                write()
            except Exception:  # one Event that fails must not stop the ones after it
                log.exception("writing an Event failed")
