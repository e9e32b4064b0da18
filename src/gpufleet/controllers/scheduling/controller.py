"""The embedded scheduling controller: wires its four parts into the controller manager's interface.

Each step: the cache is rebuilt if it must be, workloads whose backoff ended are queued again, broken
gangs are evicted, cycles run and their decisions are carried out (with the pending reasons written),
elastic workloads that checkpointed may grow, and queue status is written (at most once every
`queue_status_seconds`, when set). It returns when it wants to be stepped again: the end of the next
backoff, the periodic cycle while anything is pending, or a deferred queue status pass. While the last
pass's decisions stand until the cache changes (`scheduler.settled`), the periodic cycle is not run:
the waiting gauges are aged instead.
"""

from __future__ import annotations

from gpufleet.controllers import lifecycle
from gpufleet.controllers.decisions import Carrier, Oldest, record_waited, run_cycles
from gpufleet.controllers.scheduling import recharge
from gpufleet.controllers.scheduling.actions import Actions
from gpufleet.controllers.scheduling.cachesync import CacheSync
from gpufleet.controllers.scheduling.growth import Growth
from gpufleet.controllers.scheduling.state import SchedulingState, SchedulingStats
from gpufleet.controllers.scheduling.status import StatusWriter
from gpufleet.observability import tracing
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.cycle import Scheduler
from gpufleet.scheduler.explain import Admit
from gpufleet.scheduler.settled import stamp
from gpufleet.store.protocol import Store, WatchEvent


class SchedulingController:
    """Owns the scheduler cache and is the only writer of Workload status and of Pod creation."""

    name = "scheduling"
    kinds: tuple[str, ...] = (
        "Node",
        "Pod",
        "Workload",
        "Queue",
        "GPUPool",
        "ResourceSlice",
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
    )

    def __init__(
        self,
        store: Store,
        *,
        config: SchedulerConfig | None = None,
        resync_seconds: float = 30.0,
        queue_status_seconds: float = 0.0,
        reason_refresh_seconds: float = 0.0,
        export_metrics: bool = True,
    ) -> None:
        """`queue_status_seconds`: the least time between two passes that write queue status (0:
        after every step that changed a queue's numbers, as `gpufleet up` does).
        `reason_refresh_seconds`: the least time between two passes that write pending reasons whose
        numbers alone changed (0: at every pass, as `gpufleet up` does); a changed type or node
        demand is written at once. The periodic cycle, which runs while anything waits, brings them
        up to date once the time has passed.
        `export_metrics`: whether the scheduler keeps its Prometheus series (`SchedulingState`)."""
        self.store = store
        self.config = config or SchedulerConfig()
        self.scheduler = Scheduler(self.config)
        self.resync_seconds = resync_seconds
        self.state = SchedulingState(store, self.config, export_metrics=export_metrics)
        self.status = StatusWriter(self.state, reason_refresh_seconds=reason_refresh_seconds)
        self.sync = CacheSync(self.state, self.status)
        self.actions = Actions(self.state, self.sync, self.status)
        self.growth = Growth(self.state, self.scheduler, self.actions, self.status)
        self.next_periodic = 0.0
        self.settled = False
        """The last pass decided nothing and its decisions stand until the cache changes."""
        self._oldest: Oldest = {}
        self._stamp: tuple[int, ...] = ()
        self.queue_status_seconds = queue_status_seconds
        self.next_queue_status = 0.0

    @property
    def cache(self) -> ClusterCache | None:
        return self.state.cache

    @property
    def stats(self) -> SchedulingStats:
        return self.state.stats

    @property
    def contained_failures(self) -> int:
        """Workloads and nodes the scheduler failed on with an error no user caused, each time it did
        (`SchedulingState.left_out`); the controller manager adds them to its count."""
        return self.state.failures

    @property
    def needs_rebuild(self) -> bool:
        return self.state.needs_rebuild

    @needs_rebuild.setter
    def needs_rebuild(self, value: bool) -> None:
        self.state.needs_rebuild = value

    # ================================================================ manager interface
    def resync(self, now: float) -> None:
        self.state.needs_rebuild = True

    def observe(self, event: WatchEvent, now: float) -> None:
        self.sync.observe(event, now)

    def step(self, now: float) -> float | None:
        state = self.state
        state.last_now = now
        if state.needs_rebuild or state.cache is None:
            self.sync.rebuild(now)
        for name, at in sorted(state.backoff.items()):
            if at <= now:
                del state.backoff[name]
                self.sync.sync_workload(name, now)
        for name in sorted(state.broken):
            cause = state.broken.pop(name)
            if state.cache is not None and name in state.cache.admitted:
                self.actions.evict(name, now, reason=cause.reason, message=cause.message)
        if state.dirty or (now >= self.next_periodic and not self._settled(now)):
            self._schedule(now)
        elif now >= self.next_periodic:
            # The last pass's decisions stand until the cache changes: only the waits grew.
            self.next_periodic = now + self.resync_seconds
            if self.state.export_metrics:
                record_waited(self._oldest, now)
        if state.grow:
            self.growth.grow(now)
        recharge.record_recharged(state)  # after finishes and evictions: who pays for shared claims now
        wakes = list(state.backoff.values())
        if state.queues_dirty:
            if now >= self.next_queue_status:
                self.status.queues()
                self.next_queue_status = now + self.queue_status_seconds
            else:  # written at the end of the interval, with every change made meanwhile
                wakes.append(self.next_queue_status)
        assert state.cache is not None
        if state.cache.pending:
            wakes.append(self.next_periodic)
        return min(wakes, default=None)

    def _schedule(self, now: float) -> None:
        state = self.state
        cache = state.cache
        assert cache is not None
        state.dirty = False
        self.next_periodic = now + self.resync_seconds
        # The cycle loop is shared with the Kubernetes world; this world's carrier creates bound Pods.
        outcome = run_cycles(
            scheduler=self.scheduler,
            cache=cache,
            carrier=Carrier(
                preempt=self.actions.preempt,
                admit=self._admit,
                leave_out=self.sync.leave_out,
                trace_uid=self._trace_uid,
            ),
            now=now,
            max_cycles=self.config.max_cycles,
            export_metrics=self.state.export_metrics,
        )
        state.stats.cycles += outcome.cycles
        self.settled = outcome.last is not None and outcome.last.settled
        self._stamp = stamp(cache)
        self._oldest = outcome.oldest
        self.status.reasons(outcome.last, now)
        self.growth.write_short_demand()

    def _settled(self, now: float) -> bool:
        """Whether the periodic pass due now would find what the last pass found (`scheduler.settled`)
        and has nothing left to write: no pending reason waits for its refresh."""
        cache = self.state.cache
        return (
            self.settled
            and cache is not None
            and stamp(cache) == self._stamp
            and not self.status.refresh_due(now)
        )

    def _admit(self, admit: Admit, now: float) -> None:
        """Carries out an admission; its pods are created bound, so a kept one is the `bound` step."""
        self.actions.admit(admit, now)
        cache = self.state.cache
        if tracing.enabled() and cache is not None and admit.workload in cache.admitted:
            uid = self._trace_uid(admit.workload)
            pods = len(admit.allocations)
            lifecycle.bound(uid, workload=admit.workload, nodes=admit.nodes, pods=pods, now=now)

    def _trace_uid(self, name: str) -> str | None:
        """A workload's trace is named after its Workload object's uid, which lives as long as the
        object, across restarts (attempts) and restarts of this process."""
        obj = self.state.workloads.get(name)
        return obj.metadata.uid if obj is not None else None
