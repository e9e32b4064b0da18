"""Attained service and the discretised least-attained-service order (Tiresias' 2D-LAS rule).

Tiresias (Gu et al., NSDI 2019) orders jobs whose durations are unknown by the service they have had:
GPUs x seconds run so far ("two-dimensional" because a wide gang ages faster than a narrow one). The
continuous rule would reorder jobs at every instant; the discretised one puts each job in one of K
priority levels by thresholds on attained GPU-seconds, keeps FIFO order inside a level, and lets a
job of a lower level (less service) preempt one of a higher level. A job that has waited for long
relative to how long it ran is promoted back to the first level, so a long job is never starved.

The cache keeps each workload's attained service across evictions, as the world reports them
(`ClusterCache.evict` / `finish`), so the core needs no clock and no store for it: a workload's
service is what it ran between its admissions and its evictions, plus what it has run since its
current admission at the cycle's `now`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True, slots=True)
class LasSettings:
    """A least-attained-service queue's levels and starvation rule."""

    thresholds: tuple[float, ...] = (3600.0, 16 * 3600.0)
    """Attained GPU-seconds at which a workload moves down one level (level i holds service in
    [thresholds[i-1], thresholds[i])); increasing, positive."""
    promote_factor: float | None = 4.0
    """A workload that has waited `promote_factor` times as long as it ran (its latest wait, since its
    last eviction) goes back to the first level; None: never promoted."""

    def __post_init__(self) -> None:
        if any(t <= 0 for t in self.thresholds) or any(b <= a for a, b in pairwise(self.thresholds)):
            raise ValueError(f"thresholds must be positive and increasing, got {list(self.thresholds)}")
        if self.promote_factor is not None and self.promote_factor <= 0:
            raise ValueError(f"promote factor must be positive, got {self.promote_factor}")


@dataclass(frozen=True, slots=True)
class Service:
    """What a workload has run before its current admission (or while it waits)."""

    gpu_seconds: float = 0.0
    run_seconds: float = 0.0
    """Wall seconds it was admitted, over all its runs (the 'executed time' of the starvation rule)."""
    stopped_at: float | None = None
    """When its latest run ended (None: it never ran)."""


NEVER_RAN = Service()


class AttainedService:
    """Per workload name, the service it has had in its finished runs."""

    def __init__(self) -> None:
        self._done: dict[str, Service] = {}

    def of(self, name: str) -> Service:
        return self._done.get(name, NEVER_RAN)

    def stopped(self, name: str, *, gpu_milli: int, admitted_at: float | None, now: float) -> None:
        """A run of `gpu_milli` milli-GPUs admitted at `admitted_at` ended at `now` (evicted)."""
        before = self.of(name)
        ran = max(0.0, now - admitted_at) if admitted_at is not None else 0.0
        self._done[name] = Service(before.gpu_seconds + gpu_milli / 1000 * ran, before.run_seconds + ran, now)

    def forget(self, name: str) -> None:
        """The workload is gone for good (finished)."""
        self._done.pop(name, None)

    def __len__(self) -> int:
        return len(self._done)


def level(settings: LasSettings, gpu_seconds: float) -> int:
    """The level of a workload with this much attained service (0: the least, tried first)."""
    return bisect.bisect_right(settings.thresholds, gpu_seconds)


def running_level(
    settings: LasSettings, before: Service, *, gpu_milli: int, admitted_at: float | None, now: float
) -> int:
    """The level of an admitted workload at `now`: its past service plus its current run's."""
    ran = max(0.0, now - admitted_at) if admitted_at is not None else 0.0
    return level(settings, before.gpu_seconds + gpu_milli / 1000 * ran)


def waiting_level(settings: LasSettings, service: Service, *, submitted_at: float, now: float) -> int:
    """The level of a pending workload at `now`: by its attained service, or the first level when the
    starvation rule promotes it (it has waited `promote_factor` times as long as it has run)."""
    found = level(settings, service.gpu_seconds)
    factor = settings.promote_factor
    if found == 0 or factor is None or service.run_seconds <= 0:
        return found
    waited = now - (service.stopped_at if service.stopped_at is not None else submitted_at)
    return 0 if waited >= factor * service.run_seconds else found
