"""How the manager's pass reaches its workers without one slow or failing worker holding up the others.

Every call to a worker may take its link's whole timeout (5 s over HTTP or to an API server) when the
worker drops packets. Walked one worker after another, each such call delayed every worker after it,
every pass. `WorkerReach` bounds that cost in two ways:

- **Back-off.** A worker whose call failed (or did not finish in time) is left alone for a while:
  `backoff_seconds` after the first failure, doubling with each further one up to
  `max_backoff_seconds`, on the pass's clock. Meanwhile the manager neither reads nor writes there nor
  dispatches there; its lease alone decides whether its work moves (`federation.mirror`): the lease
  rule does not depend on the manager reaching the worker, only on the worker's heartbeats.
- **A deadline** (`deadline_seconds`, optional). Each worker's calls of a pass run in their own thread,
  and the pass waits for them at most that long: a worker that has not answered by then counts as out
  of touch for this pass (and backs off) while the others go on. Its call finishes in its thread, and
  nothing more is sent there until it has; what it answers late is dropped, since the pass went on
  without it. Without a deadline the calls run one after another in the pass's thread, in order: what
  a run on a virtual clock needs to be reproducible (`cli.fedtwin`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from gpufleet.api.errors import GpuFleetError

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 16.0
"""Short against a lease (30 s by default): a worker that answers again gets work again soon."""
MAX_THREADS = 16
LIVE_DEADLINE_SECONDS = 2.0
"""The deadline the live managers (`gpufleet up --manager`, `gpufleet kube manager`) give a worker's
calls of a pass: well under a request's 5 s timeout, and far over a healthy worker's answer."""


@dataclass(slots=True)
class _Worker:
    failures: int = 0
    retry_at: float = float("-inf")
    busy: bool = False
    """A call of an earlier pass still runs in its thread."""


class WorkerReach:
    """Runs the pass's calls to each worker, and remembers which workers to leave alone for now."""

    def __init__(
        self,
        *,
        deadline_seconds: float | None = None,
        backoff_seconds: float = BACKOFF_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        if deadline_seconds is not None and deadline_seconds <= 0:
            raise ValueError(f"the deadline of a pass's calls must be positive, got {deadline_seconds}")
        if backoff_seconds < 0 or max_backoff_seconds < backoff_seconds:
            raise ValueError(
                f"the back-off must be 0 <= backoff_seconds <= max_backoff_seconds, got {backoff_seconds} "
                f"and {max_backoff_seconds}"
            )
        self.deadline_seconds = deadline_seconds
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._workers: dict[str, _Worker] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def available(self, cluster: str, now: float) -> bool:
        """Whether the pass may call the worker: no call of its still runs and it is not backing off."""
        with self._lock:
            state = self._workers.get(cluster)
            return state is None or (not state.busy and now >= state.retry_at)

    def failed(self, cluster: str, now: float, why: object) -> None:
        """A call to the worker failed: leave it alone for a while."""
        with self._lock:
            state = self._workers.setdefault(cluster, _Worker())
            delay = min(self.backoff_seconds * 2**state.failures, self.max_backoff_seconds)
            state.failures += 1
            state.retry_at = now + delay
        log.warning("cluster %s: %s; not called again for %.0f s", cluster, why, delay)

    def succeeded(self, cluster: str) -> None:
        """A call answered, or the worker is reached anew (it joined again): no back-off."""
        with self._lock:
            state = self._workers.get(cluster)
            if state is not None:
                state.failures, state.retry_at = 0, float("-inf")

    def run(self, calls: Mapping[str, Callable[[], T]], now: float) -> dict[str, T]:
        """Runs each worker's calls (one callable per cluster); the answers of those that succeeded in
        time. A `GpuFleetError` or a late answer backs that worker off; other errors propagate."""
        if self.deadline_seconds is None:
            answers = {}
            for cluster, call in calls.items():
                try:
                    answers[cluster] = call()
                except GpuFleetError as exc:
                    self.failed(cluster, now, f"cannot read it: {exc}")
                    continue
                self.succeeded(cluster)
            return answers
        return self._run_threaded(calls, now, self.deadline_seconds)

    def _run_threaded(
        self, calls: Mapping[str, Callable[[], T]], now: float, deadline: float
    ) -> dict[str, T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="federation-worker")
        futures: dict[str, Future[T]] = {}
        for cluster, call in calls.items():
            with self._lock:
                self._workers.setdefault(cluster, _Worker()).busy = True
            future = self._pool.submit(call)
            future.add_done_callback(partial(self._done, cluster))
            futures[cluster] = future
        wait(futures.values(), timeout=deadline)
        answers = {}
        for cluster, future in futures.items():
            if not future.done():
                self.failed(cluster, now, f"did not answer within {deadline:g} s")
                continue
            error = future.exception()
            if isinstance(error, GpuFleetError):
                self.failed(cluster, now, f"cannot read it: {error}")
                continue
            answers[cluster] = future.result()  # raises what is not the link's error
            self.succeeded(cluster)
        return answers

    def _done(self, cluster: str, _future: Future[T]) -> None:
        with self._lock:
            self._workers[cluster].busy = False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
