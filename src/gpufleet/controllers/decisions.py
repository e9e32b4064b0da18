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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler
from gpufleet.scheduler.explain import Admit, Preempt


@dataclass(frozen=True, slots=True)
class Carrier:
    """How one world carries out decisions; each call also updates the cache (assume or forget)."""

    preempt: Callable[[Preempt, float], None]
    """Evict the victim whole, or shrink it by the pods named (an elastic workload)."""
    admit: Callable[[Admit, float], None]
    """Start the admitted workload on the allocations chosen: `cache.admit` first, then the writes."""


@dataclass(frozen=True, slots=True)
class Outcome:
    cycles: int
    last: CycleResult | None
    """The last cycle's result, whose pending workloads need their reasons said; None when nothing
    was pending after the last cycle."""


def run_cycles(
    *,
    scheduler: Scheduler,
    cache: ClusterCache,
    carrier: Carrier,
    now: float,
    max_cycles: int,
    batch: int | None = None,
) -> Outcome:
    """Runs cycles on `cache` and carries out each one's decisions through `carrier`.

    With `batch`, the first cycle admits at most that many workloads before its decisions are carried
    out, and each next cycle twice as many as the one before: a world whose writes are slow starts them
    while the rest of a large backlog is still being decided, and a backlog still takes few cycles."""
    cycles = 0
    last: CycleResult | None = None
    limit = batch
    for _ in range(max_cycles):
        if not cache.pending:
            last = None
            break
        result = scheduler.cycle(cache, now=now, limit=limit)
        limit = limit * 2 if limit is not None else None
        cycles += 1
        last = result
        for preempt in result.preempted:
            carrier.preempt(preempt, now)
        for admit in result.admitted:
            carrier.admit(admit, now)
        cache.nominated = [name for name in result.nominated if name in cache.pending]
        if not result.changed:
            break
    return Outcome(cycles, last)
