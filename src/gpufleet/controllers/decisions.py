"""Carrying out a scheduling cycle's decisions, the same way in every world (KAI's statement commit).

The core decides on a `ClusterCache` and returns decisions; a world carries them out. What the
worlds share lives here once: cycles run until one changes nothing (or `max_cycles`), each cycle's
preemptions are carried out before its admissions (victims leave before preemptors arrive), and the
preemptors whose victims were just evicted are tried first in the next cycle, so the capacity freed
for them is not taken by someone else (the core's rule against preemption loops). The last cycle's
pending workloads are what the world explains.

What differs is the `Carrier`, the port each world implements: the embedded world's admission
creates Pods already bound and writes the Workload's status; the Kubernetes world's binds Pods that
exist through the Binding subresource. Both assume the decision in the cache first and forget it when
the write fails (Kueue's assume-then-write), so the next cycle sees the assumption at once.

The metrics of cycles, admissions, preemptions and pending workloads are recorded here, once for both
worlds (`gpufleet.observability.metrics`), and so are, when tracing is on, each cycle's span and the
admitted, placed and preempted steps of the workloads' traces (`controllers.lifecycle`), under the
uid the carrier names each workload by.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufleet.controllers import lifecycle
from gpufleet.observability import metrics, tracing
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler
from gpufleet.scheduler.explain import Admit, Preempt
from gpufleet.scheduler.workload import Workload

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger(__name__)
Oldest = dict[tuple[str, str], float]
"""(queue, reason) -> when the longest-waiting workload with that reason was submitted."""
_cycle_numbers = itertools.count(1)
"""Numbers the process's cycles, for the `cycle` field of log lines."""


@dataclass(frozen=True, slots=True)
class Carrier:
    """How one world carries out decisions; each call also updates the cache (assume or forget)."""

    preempt: Callable[[Preempt, float], None]
    """Evict the victim whole, or shrink it by the pods named (an elastic workload)."""
    admit: Callable[[Admit, float], None]
    """Start the admitted workload on the allocations chosen: `cache.admit` first, then the writes."""
    leave_out: Callable[[str, Exception], None]
    """Set aside a workload whose attempt raised (`CycleResult.errors`: a bug its numbers trip): the
    world logs the error with its traceback, counts it as a contained failure (`controllers.failures`)
    and takes the workload out of the queue, its status saying why, until it changes."""
    trace_uid: Callable[[str], str | None] = lambda name: None
    """The uid of the object a workload of the cache stands for, which names its trace and the
    `trace_id` of its log lines (`observability.tracing`); None where the world knows none."""


@dataclass(frozen=True, slots=True)
class Outcome:
    cycles: int
    last: CycleResult | None
    """The last cycle's result, whose pending workloads need their reasons said; None when nothing
    was pending after the last cycle."""
    oldest: Oldest
    """Per queue and reason, when the longest-waiting workload was submitted (`record_pending`)."""


def run_cycles(
    *,
    scheduler: Scheduler,
    cache: ClusterCache,
    carrier: Carrier,
    now: float,
    max_cycles: int,
    batch: int | None = None,
    export_metrics: bool = True,
) -> Outcome:
    """Runs cycles on `cache` and carries out each one's decisions through `carrier`.

    With `batch`, the first cycle admits at most that many workloads before its decisions are carried
    out, and each next cycle twice as many as the one before: a world whose writes are slow starts them
    while the rest of a large backlog is still being decided, and a backlog still takes few cycles.
    Without `export_metrics`, no Prometheus series is touched (a process that serves none: the job
    simulator's) and the outcome names no oldest waiting workload (only the series age them)."""
    cycles = 0
    last: CycleResult | None = None
    limit = batch
    for _ in range(max_cycles):
        if not cache.pending:
            last = None
            break
        started = time.perf_counter()
        number = next(_cycle_numbers)
        span = tracing.cycle_span(number, at=now) if tracing.enabled() else None
        considered = len(cache.pending)
        result = scheduler.cycle(cache, now=now, limit=limit)
        limit = limit * 2 if limit is not None else None
        cycles += 1
        last = result
        for name, error in result.errors.items():
            carrier.leave_out(name, error)
        for preempt in result.preempted:
            _count_preemption(cache, preempt, number, carrier, now, span, export_metrics=export_metrics)
            carrier.preempt(preempt, now)
        for admit in result.admitted:
            waited = cache.pending.get(admit.workload)
            if span is not None:  # the decision, before the world's writes (its `bound` step)
                queue = waited.queue if waited is not None else ""
                uid = carrier.trace_uid(admit.workload)
                lifecycle.admitted(
                    uid, admit, queue=queue, cycle=number, now=now, links=tracing.link_to(span)
                )
            carrier.admit(admit, now)
            if export_metrics:
                _count_admission(admit, waited, now)
            if log.isEnabledFor(logging.DEBUG):
                _log_admission(admit, waited, number, carrier)
        cache.nominated = [name for name in result.nominated if name in cache.pending]
        elapsed = time.perf_counter() - started
        if export_metrics:
            metrics.CYCLE_SECONDS.observe(elapsed)
            metrics.CYCLES.inc()
        if span is not None:
            outcome = {
                "gpufleet.workloads.considered": considered,
                "gpufleet.workloads.admitted": len(result.admitted),
                "gpufleet.workloads.preempted": len(result.preempted),
                "gpufleet.workloads.pending": len(result.pending),
            }
            tracing.end_cycle(span, at=now, seconds=elapsed, attributes=outcome)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "cycle: %d admitted, %d preempted, %d pending",
                len(result.admitted),
                len(result.preempted),
                len(result.pending),
                extra={"cycle": number},
            )
        if not result.changed:
            break
    return Outcome(cycles, last, record_pending(cache, last, now) if export_metrics else {})


def _count_preemption(
    cache: ClusterCache,
    preempt: Preempt,
    cycle: int,
    carrier: Carrier,
    now: float,
    span: Span | None,
    *,
    export_metrics: bool,
) -> None:
    victim = cache.admitted.get(preempt.victim)
    queue = victim.queue if victim is not None else ""
    if export_metrics:
        metrics.PREEMPTIONS.labels(queue, preempt.cause).inc()
    uid = carrier.trace_uid(preempt.victim)
    context = lifecycle.log_fields(preempt.victim, queue=queue, uid=uid) | {"cycle": cycle}
    log.info("preempting for %s (%s): %s", preempt.preemptor, preempt.cause, preempt.message, extra=context)
    if span is not None:
        lifecycle.preempted(uid, preempt, queue=queue, cycle=cycle, now=now, links=tracing.link_to(span))


def _count_admission(admit: Admit, workload: Workload | None, now: float) -> None:
    queue = workload.queue if workload is not None else ""
    for flavor in admit.assignment.usage or {"none": 0}:
        metrics.ADMISSIONS.labels(queue, flavor).inc()
    if workload is not None:
        metrics.ADMISSION_WAIT.labels(queue).observe(max(0.0, now - workload.submitted_at))


def _log_admission(admit: Admit, workload: Workload | None, cycle: int, carrier: Carrier) -> None:
    queue = workload.queue if workload is not None else ""
    nodes = sorted(set(admit.nodes))
    uid = carrier.trace_uid(admit.workload)
    context = lifecycle.log_fields(admit.workload, queue=queue, uid=uid) | {"cycle": cycle}
    if len(nodes) == 1:
        context["node"] = nodes[0]
    log.debug("admitted on %s", ", ".join(nodes), extra=context)


def record_pending(cache: ClusterCache, last: CycleResult | None, now: float) -> Oldest:
    """Sets the pending gauges from the last cycle's reasons: per queue and reason, how many wait and
    how long the longest-waiting one has (since submission, on the world's clock); returns when those
    were submitted, for `record_waited` to age them while the decisions stand."""
    counts: dict[tuple[str, str], float] = {}
    first: Oldest = {}
    if last is not None:
        # Once per pass over every waiting workload (a backlog may be tens of thousands): kept lean.
        waiting = cache.pending
        for name, pending in last.pending.items():
            workload = waiting.get(name)
            if workload is None:
                continue
            key = (workload.queue, pending.reason.type)
            counts[key] = counts.get(key, 0) + 1
            submitted = workload.submitted_at
            if submitted < first.get(key, math.inf):
                first[key] = submitted
    metrics.set_series(metrics.PENDING_WORKLOADS, counts)
    record_waited(first, now)
    return first


def record_waited(oldest: Oldest, now: float) -> None:
    """Sets how long the longest-waiting workload per queue and reason has waited by `now`."""
    metrics.set_series(metrics.PENDING_OLDEST, {key: max(0.0, now - at) for key, at in oldest.items()})
