"""What the embedded scheduler writes about workloads and queues: status, pending reasons, events.

The scheduling controller is the only writer of a Workload's status. A pending workload's reason is
written only when it changes, with the pools whose new nodes could serve it (`status.nodeDemand`,
read by the pool autoscaler); a Warning `FailedScheduling` Event goes to its owner when the reason
first appears or changes type. With `reason_refresh_seconds` set, a reason whose type and node demand
are unchanged and only its numbers moved (a queue's usage in `QuotaExceeded`, the nodes each filter
rejected in `NoFit`) is written at most that often: on a loaded fleet every admission moves the
numbers of every waiting workload of its queue, and each such write is also its owner's. A queue's
status (its `Valid` condition, waiting and admitted workloads, usage per flavor) is derived by the
rule both worlds share (`controllers.queuestatus`).
"""

from __future__ import annotations

import dataclasses
import json
import logging

from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.api.meta import Condition, PendingReason, set_condition
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import NodeDemand, WorkloadStatus
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import capacity, events, lifecycle, queuestatus
from gpufleet.controllers.queuestatus import queue_reason
from gpufleet.controllers.scheduling.state import SOURCE, SchedulingState
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.scheduler import explain
from gpufleet.scheduler.cycle import CycleResult
from gpufleet.scheduler.explain import Pending, Reason

log = logging.getLogger(__name__)


class StatusWriter:
    """Writes workload and queue status from the shared state, keeping the state's copies current."""

    def __init__(self, state: SchedulingState, *, reason_refresh_seconds: float = 0.0) -> None:
        self.state = state
        self.reason_refresh_seconds = reason_refresh_seconds
        self.next_reason_refresh = 0.0
        """Until then, a reason that changed only its message and details waits for a later pass."""
        self._deferred = False
        """Some reason waits for the next refresh (reset by a pass that refreshes)."""
        self._reported: dict[str, tuple[Queue, queuestatus.QueueReport]] = {}
        """Per queue, the object it had after the last pass and what that pass reported. Most
        passes change one or two queues' numbers; a queue whose object and report are both as
        they were already carries that report, and building its status again to compare it
        was most of a pass's cost."""
        self._told: dict[str, tuple[Pending, WorkloadObject, object, bool]] = {}
        """Per workload, the core's decision, the workload and what `state.reasons` held once that
        decision was looked at, and whether a change only of numbers was left for the next refresh
        (`reason_refresh_seconds`); nothing else was left to write. A parked workload is handed the very
        same decision every cycle (`scheduler.parking`); with everything else the reason is built
        from unchanged too, there is nothing to look at again. On a backlog of thousands that look
        was most of a scheduling pass."""

    def write(self, key: str, obj: WorkloadObject, status: WorkloadStatus) -> None:
        """Writes a workload status computed from `obj`; on a conflict, once more on the fresh object."""
        store = self.state.store
        for _ in range(2):
            try:
                written = store.update_status(obj.model_copy(update={"status": status}))
                self.state.workloads[key] = written
                return
            except ConflictError:
                try:
                    fresh = store.get(WorkloadObject, obj.name, obj.namespace)
                except NotFoundError:
                    return
                obj = fresh
            except NotFoundError:
                return
        context = lifecycle.log_fields(key, queue=obj.spec.queue, uid=obj.metadata.uid)
        log.warning("status of workload %s not written after a conflict", key, extra=context)

    # These three assign top-level fields of the status and change no nested value in place, so a
    # shallow copy of it is enough (the deep copy of an admitted workload's status was 2% of a
    # simulation's CPU).

    def inactive(self, key: str, obj: WorkloadObject) -> None:
        status = obj.status.model_copy(
            update={"phase": "Inactive", "pending_reason": None, "requeue_at": None}
        )
        self.write(key, obj, status)

    def reactivated(self, key: str, obj: WorkloadObject) -> WorkloadObject:
        """Back in scheduling after `active: false` (a resumed job): Pending again."""
        self.write(key, obj, obj.status.model_copy(update={"phase": "Pending"}))
        return self.state.workloads.get(key, obj)

    def gave_up(self, key: str, obj: WorkloadObject) -> None:
        """Failed while waiting to restart: evicted more times than its (since lowered) limit allows."""
        cleared = {"pending_reason": None, "requeue_at": None}
        self.write(key, obj, obj.status.model_copy(update={"phase": "Failed", **cleared}))

    def out_of_queue(self, key: str, obj: WorkloadObject, reason: str, message: str) -> None:
        """Pending, out of the queue: because of its pods' ResourceClaims (`ClaimsNotReady`: a claim,
        template or class that does not exist; `InvalidClaims`: claims the scheduler cannot count; it
        is looked at again when claims, templates or devices change), or because the scheduler failed
        on it (`SchedulingError`: looked at again when it changes). Written only when it changes."""
        entry: dict[str, object] = {"type": reason, "message": message}
        if self.state.reasons.get(key) == entry:
            return
        status = obj.status.model_copy(deep=True)
        status.pending_reason = PendingReason(type=reason, message=message)
        self.write(key, obj, status)
        self.state.reasons[key] = entry

    def queues(self) -> None:
        """Per queue: its `Valid` condition, waiting and admitted workloads and GPUs in use per flavor,
        its subtree included (what `gpufleet get queues` and `top` show beside the nominal quota), by
        the rule both worlds share (`queuestatus`). Written only on change; a queue that becomes
        invalid, or whose problem changes, gets one Warning `InvalidQueue` Event."""
        state = self.state
        cache = state.cache
        assert cache is not None
        state.queues_dirty = False
        # Every Pending workload waits, those in backoff after an eviction included (the core holds
        # only the ones it may admit now).
        pending = [
            obj.spec.queue
            for obj in state.workloads.values()
            if obj.status.phase == "Pending" and obj.spec.active and obj.metadata.deletion_timestamp is None
        ]
        reports = queuestatus.reports(
            cache,
            state.queues,
            invalid=state.invalid_queues,
            pending=pending,
            export_metrics=state.export_metrics,
        )
        for name, report in reports.items():
            queue = state.queues[name]
            last = self._reported.get(name)
            if last is not None and last[0] is queue and last[1] == report:
                continue
            before = _validity(queue)
            status = queue.status.model_copy(
                update={
                    "pending_workloads": report.pending_workloads,
                    "admitted_workloads": report.admitted_workloads,
                    "usage": report.usage,
                    "conditions": self._valid_condition(queue, report.valid),
                }
            )
            if status == queue.status:
                self._reported[name] = (queue, report)
                continue
            try:
                state.queues[name] = state.store.update_status(queue.model_copy(update={"status": status}))
            except (ConflictError, NotFoundError):
                state.queues_dirty = True  # a newer queue is on its way in; written next step
                continue
            self._reported[name] = (state.queues[name], report)
            if queuestatus.warns(before, report.valid):
                events.record(
                    state.store,
                    queue,
                    reason=queuestatus.INVALID_QUEUE_EVENT,
                    message=report.valid.message,
                    now=state.last_now,
                    type="Warning",
                    source=SOURCE,
                )

    def _valid_condition(self, queue: Queue, valid: queuestatus.Validity) -> list[Condition]:
        wanted = Condition(
            type=queuestatus.VALID, status=valid.status, reason=valid.reason, message=valid.message
        )
        return set_condition(queue.status.conditions, wanted, now=to_datetime(self.state.last_now))

    def refresh_due(self, now: float) -> bool:
        """Whether a reason left for the next refresh is due to be written by `now`."""
        return self._deferred and now >= self.next_reason_refresh

    def reasons(self, result: CycleResult | None, now: float) -> None:
        """Writes each pending workload's reason, only when it changed."""
        if result is None:
            self._told.clear()  # nothing waits: what was told of those that did is of no more use
            self._deferred = False
            return
        state = self.state
        refresh = now >= self.next_reason_refresh
        if refresh:
            self.next_reason_refresh = now + self.reason_refresh_seconds
            self._deferred = False  # every reason left for it is looked at again below
        told, workloads, said_before = self._told, state.workloads, state.reasons
        for key, pending in result.pending.items():
            obj = workloads.get(key)
            if obj is None or obj.status.phase != "Pending":
                continue
            # Looked at already: this very decision about this very workload, with its reason as
            # written then, and not left for a refresh that is due now. What else the reason is built
            # from (the quota tree, the queues left out of it, the pools) changes only with
            # `state.reasons` cleared, which the identity test of what was written sees.
            seen = told.get(key)
            if (
                seen is not None
                and seen[0] is pending
                and seen[1] is obj
                and seen[2] is said_before.get(key)
                and not (refresh and seen[3])
            ):
                continue
            core_pending = pending
            queue_reason = self._queue_reason(obj.spec.queue)
            if queue_reason is not None:
                pending = dataclasses.replace(pending, reason=queue_reason)
            demand = self._node_demand(obj, pending.reason)
            # Compared as the core gave it: a long queue is looked at every cycle, and most of it
            # is told what it was told before.
            said = (pending.reason, None if demand is None else demand.pools)
            last = state.reasons.get(key)
            if last == said:
                told[key] = (core_pending, obj, last, False)
                continue
            if not refresh and _same_but_numbers(last, said):
                told[key] = (core_pending, obj, last, True)  # written at the next refresh
                self._deferred = True
                continue
            before = obj.status.pending_reason
            if before is None or before.type != pending.reason.type:
                self._failed_scheduling(obj, pending.reason, now)
            status = obj.status.model_copy(deep=True)
            status.pending_reason = PendingReason(
                type=pending.reason.type, message=pending.reason.message, details=_details(pending.reason)
            )
            status.node_demand = demand
            status.conditions = set_condition(
                status.conditions,
                Condition(
                    type="Admitted",
                    status="False",
                    reason=pending.reason.type,
                    message=pending.reason.message,
                ),
                now=to_datetime(now),
            )
            self.write(key, obj, status)
            state.reasons[key] = said
            written = state.workloads.get(key)
            if written is not None:
                told[key] = (core_pending, written, said, False)
        for gone in told.keys() - result.pending.keys():
            del told[gone]

    def _failed_scheduling(self, obj: WorkloadObject, reason: Reason, now: float) -> None:
        """A Warning event, on the workload's owner (what `describe` shows), when the reason it waits
        first appears or changes type: once per change rather than once per cycle."""
        owner = obj.spec.owner
        events.record_about(
            self.state.store,
            owner.kind or obj.kind,
            owner.name or obj.name,
            obj.namespace,
            reason="FailedScheduling",
            message=f"{reason.type}: {reason.message}",
            now=now,
            type="Warning",
            source=SOURCE,
        )

    def _queue_reason(self, queue: str) -> Reason | None:
        cache = self.state.cache
        assert cache is not None
        return queue_reason(cache.tree, self.state.invalid_queues, queue)

    def _node_demand(self, obj: WorkloadObject, reason: Reason) -> NodeDemand | None:
        """The pools whose new nodes could serve a workload that waits for nodes; None if it waits for
        something else (quota, a preemption, the head of its queue).

        It waits for nodes when no existing node can hold it (NoFit), including when its queue has
        unlimited quota and the fleet has no node of a GPU model it accepts yet."""
        cache = self.state.cache
        assert cache is not None
        queue = cache.tree.nodes.get(obj.spec.queue)
        if queue is None or reason.type != explain.NO_FIT:
            return None
        flavors = None if queue.unlimited else set(queue.quotas)
        return NodeDemand(pools=capacity.serving_pools(obj.spec, self.state.pools.values(), flavors=flavors))


def _same_but_numbers(last: object, said: tuple[Reason, list[str] | None]) -> bool:
    """Whether the reason last written differs from `said` only in its message and details."""
    if not isinstance(last, tuple):
        return False
    reason, pools = last
    return isinstance(reason, Reason) and reason.type == said[0].type and pools == said[1]


def _details(reason: Reason) -> dict[str, object]:
    return dict(json.loads(json.dumps(dict(reason.details), default=str)))


def _validity(queue: Queue) -> queuestatus.Validity | None:
    """The `Valid` condition the queue carries now, if any."""
    found = next((c for c in queue.status.conditions if c.type == queuestatus.VALID), None)
    if found is None:
        return None
    return queuestatus.Validity(found.status, found.reason or "", found.message or "")
