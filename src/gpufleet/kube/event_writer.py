"""Events written apart from the binds they report, as kube-scheduler writes them.

kube-scheduler records its Events into a broadcaster with a buffer of 1,000 that drops what does not
fit, and one goroutine writes them to the API server one after the other; its binds never wait on
them. Here likewise: a binding thread hands its `Scheduled` Event over and goes on to the next bind,
and one writer thread sends the Events in the order handed over. Under a burst of binds the Events
trail behind them (on a saturated API server, by about as long again as the burst took) instead of
taking half of the binding threads' round trips, and past `CAPACITY` waiting Events the newest is
dropped (counted in `gpufleet_events_dropped_total`): an Event is best effort, a bind is not.
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
its writer keeps pace with binds that go out slower; here a burst of binds runs ahead of the writers,
and its Events (a pod reference and a closure each) are kept rather than dropped."""
WRITERS = 1
"""Events in flight at once, kube-scheduler's one. An API server shares itself among the requests in
flight, so writers take from the binds in proportion to their number: with as many as the binder has,
binds went out at half the rate again."""


class EventWriter:
    """A few threads writing handed-over Events, taken in order; `put` never blocks."""

    def __init__(self, *, capacity: int = CAPACITY, writers: int = WRITERS) -> None:
        self._todo: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=capacity)
        self._writers = writers
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, write: Callable[[], None]) -> bool:
        """Queues `write` (which writes one Event and never raises); False when it was dropped."""
        with self._lock:
            if not self._threads:
                for n in range(self._writers):
                    thread = threading.Thread(target=self._work, daemon=True, name=f"events-{n}")
                    thread.start()
                    self._threads.append(thread)
        try:
            self._todo.put_nowait(write)
        except queue.Full:
            self.dropped += 1
            metrics.EVENTS_DROPPED.inc()
            return False
        return True

    def close(self, *, wait: bool = True) -> None:
        """Stops the writers after the Events already queued (`wait`: and waits for them)."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._todo.put(None)  # after everything queued; blocks only while the queue is full
        if wait:
            for thread in threads:
                thread.join()

    def _work(self) -> None:
        while (write := self._todo.get()) is not None:
            try:
                write()
            except Exception:  # one Event that fails must not stop the ones after it
                log.exception("writing an Event failed")
