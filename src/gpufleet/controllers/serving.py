"""How many replicas an InferenceService wants and how a new model version is rolled out, in any world.

The arithmetic of serving, apart from where replicas live (Workloads in the embedded world, Pods in
Kubernetes) and where load comes from (a ServiceLoad object, Prometheus, the pods' metrics):

- `recommend`: the autoscaler's answer to one load observation (requests per replica, p99 latency,
  the seasonal forecast), clamped to the range, with HPA-style stabilization of scale-down;
- `plan_rollout`: which replicas to add and which to remove this round, keeping the total within
  desired + maxSurge and the ready ones at least desired - maxUnavailable.

Both are pure over their arguments and a `ScalerMemory` the caller keeps (and may persist).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from gpufleet.api.inference import InferenceServiceSpec


@dataclass(frozen=True, slots=True)
class AutoscalerConfig:
    stabilization_seconds: float = 300.0
    season_seconds: float = 86400.0
    bucket_seconds: float = 300.0
    lead_seconds: float = 900.0
    """How far ahead the predictive option looks (long enough to place and load a replica)."""
    replica_backoff_seconds: float = 5.0


@dataclass(slots=True)
class ScalerMemory:
    """What the autoscaler remembers of one service between observations."""

    recent: deque[tuple[float, int]] = field(default_factory=deque)
    """(time, recommended replicas) inside the stabilization window."""
    season: dict[int, float] = field(default_factory=dict)
    """bucket of the season -> the latest requests/s observed in it."""
    last_load: float | None = None
    """Time of the last observation used (one observation is used once)."""


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One observation of a service's traffic."""

    time: float
    requests_per_second: float
    p99_latency_ms: float


@dataclass(frozen=True, slots=True)
class ScalingTargets:
    """What the service's spec asks the autoscaler for."""

    low: int
    high: int
    requests_per_replica: float | None = None
    latency_p99_ms: float | None = None
    predictive: bool = False

    @property
    def enabled(self) -> bool:
        return self.requests_per_replica is not None or self.latency_p99_ms is not None

    @classmethod
    def of(cls, spec: InferenceServiceSpec) -> ScalingTargets:
        """The targets an InferenceService's spec sets (both worlds read them the same way)."""
        scaling = spec.autoscaling
        return cls(
            low=spec.replicas.min,
            high=spec.replicas.max,
            requests_per_replica=scaling.target_requests_per_replica,
            latency_p99_ms=scaling.target_latency_p99_ms,
            predictive=scaling.predictive,
        )


@dataclass(frozen=True, slots=True)
class Recommendation:
    replicas: int
    fresh: bool
    """Whether a new observation was used (and the memory changed: worth persisting)."""


def recommend(
    *,
    targets: ScalingTargets,
    current: int,
    ready: int,
    load: LoadSample | None,
    memory: ScalerMemory,
    now: float,
    config: AutoscalerConfig,
) -> Recommendation:
    """The replica count for the service now; `current` is the count it was last given."""
    low, high = targets.low, targets.high
    if not targets.enabled:
        return Recommendation(low, False)
    current = current or low
    if load is None or memory.last_load == load.time:
        # Nothing new observed: keep the count, inside the bounds. Recording it would make the window
        # always hold the current count and block scale-down.
        return Recommendation(min(max(current, low), high), False)
    memory.last_load = load.time
    wanted = 0
    target, latency = targets.requests_per_replica, targets.latency_p99_ms
    if target is not None:
        wanted = math.ceil(load.requests_per_second / target)
        if targets.predictive:
            memory.season[_bucket(now, config)] = load.requests_per_second
            wanted = max(wanted, math.ceil(forecast(memory, now, config) / target))
    if latency is not None and load.p99_latency_ms > latency:
        wanted = max(wanted, ready + 1)
    elif latency is not None and target is None:
        wanted = current if load.p99_latency_ms > latency / 2 else current - 1
    wanted = min(max(wanted, low), high)
    window = memory.recent
    window.append((now, wanted))
    while window and window[0][0] < now - config.stabilization_seconds:
        window.popleft()
    if wanted >= current:
        return Recommendation(wanted, True)
    # The window may hold counts recommended under other bounds (a lowered max, a raised min).
    stabilized = min(current, max(w for _, w in window))
    return Recommendation(min(max(stabilized, low), high), True)


def _bucket(t: float, config: AutoscalerConfig) -> int:
    return int((t % config.season_seconds) // config.bucket_seconds)


def forecast(memory: ScalerMemory, now: float, config: AutoscalerConfig) -> float:
    """The most requests/s seen a season ago in the coming `lead_seconds` (0 without history)."""
    steps = int(config.lead_seconds // config.bucket_seconds)
    ahead = [memory.season.get(_bucket(now + (i + 1) * config.bucket_seconds, config)) for i in range(steps)]
    return max((v for v in ahead if v is not None), default=0.0)


# ----------------------------------------------------------------------------- rollout
def choose_revision(*, wanted: str, exists: bool, current: Iterable[str]) -> tuple[str, str | None]:
    """The revision to run, and the name of a requested version that does not exist (if any).

    A version that does not exist yet is not rolled out to: the service keeps serving what it runs."""
    if exists:
        return wanted, None
    running = sorted(set(current))
    return (running[0] if running else wanted), wanted


class Replica(Protocol):
    @property
    def placed(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    @property
    def index(self) -> int: ...


T = TypeVar("T", bound=Replica)


@dataclass(frozen=True, slots=True)
class RolloutPlan(Generic[T]):
    create: int
    """How many replicas of the target revision to add."""
    remove: list[T]
    """Which replicas to remove, in order."""


def removal_order(replicas: Sequence[T]) -> list[T]:
    """Which replicas go first: unplaced, then not ready, then the newest."""
    return sorted(replicas, key=lambda r: (r.placed, r.ready, -r.index))


def plan_rollout(
    *, desired: int, new: Sequence[T], old: Sequence[T], max_surge: int, max_unavailable: int
) -> RolloutPlan[T]:
    """This round's step toward `desired` replicas of the target revision (`new`), away from `old`.

    Without old replicas it is plain scaling. During a rollout new replicas are added while the total
    stays within desired + maxSurge, and old ones removed only while the ready replicas stay at least
    desired - maxUnavailable (unready old replicas can always go)."""
    if not old:
        surplus = max(0, len(new) - desired)
        return RolloutPlan(max(0, desired - len(new)), removal_order(new)[:surplus])
    room = desired + max_surge - len(new) - len(old)
    create = max(0, min(room, desired - len(new)))
    floor = desired - max_unavailable
    ready = sum(r.ready for r in [*new, *old])
    remove: list[T] = []
    for replica in removal_order(old):
        if replica.ready and ready - 1 < floor:
            continue
        remove.append(replica)
        ready -= replica.ready
    return RolloutPlan(create, remove)
