"""What an InferenceService's state is, whatever world runs its replicas.

Shared by the embedded InferenceService controller (replicas are Workloads) and the Kubernetes
operator (replicas are Pods), on top of the arithmetic of `controllers.serving`:

- `Autoscaler`: the replica count a service wants now, with the memory (season, stabilization window,
  the time of the last observation used) each service keeps between observations, restored from and
  saved into its ServiceLoad's status;
- `rollout_step`: which revision to serve, how many replicas of it to add and which to remove now;
- `service_status` and `service_events`: what status, conditions and Events say.

Each world reads its replicas into objects with `revision`, `index`, `placed` and `ready`, and its
load into a `LoadSample`, and carries out the decisions with its own writes.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from gpufleet.api import accounting
from gpufleet.api.inference import InferenceService, InferenceServiceSpec, InferenceServiceStatus
from gpufleet.api.meta import Condition, PendingReason, set_condition
from gpufleet.api.numerals import plain_digits
from gpufleet.api.runtime import Recommendation, ServiceLoadSpec, ServiceLoadStatus
from gpufleet.controllers import jobstate
from gpufleet.controllers.notice import Notice
from gpufleet.controllers.serving import (
    AutoscalerConfig,
    LoadSample,
    Replica,
    ScalerMemory,
    ScalingTargets,
    choose_revision,
    plan_rollout,
    recommend,
)
from gpufleet.controllers.timeutil import to_datetime, to_seconds

NO_VERSION = "none"
"""The revision of replicas of a service that names no ModelVersion."""


# ------------------------------------------------------------------------------- autoscaling
def load_sample(spec: ServiceLoadSpec) -> LoadSample:
    """A ServiceLoad's observation as the autoscaler takes it."""
    return LoadSample(spec.time.timestamp(), spec.requests_per_second, spec.p99_latency_ms)


def restore(kept: ServiceLoadStatus | None) -> ScalerMemory:
    """The autoscaler's memory as a ServiceLoad's status kept it (empty without one)."""
    memory = ScalerMemory()
    if kept is None:
        return memory
    memory.season = {int(bucket): rps for bucket, rps in kept.season.items() if plain_digits(bucket)}
    memory.recent.extend((to_seconds(r.time) or 0.0, r.replicas) for r in kept.recent)
    memory.last_load = to_seconds(kept.last_sample_time)
    return memory


def remembered(kept: ServiceLoadStatus, memory: ScalerMemory) -> ServiceLoadStatus:
    """`kept` holding the autoscaler's memory now, so that a restarted controller scales the same."""
    return kept.model_copy(
        update={
            "season": {str(bucket): rps for bucket, rps in sorted(memory.season.items())},
            "recent": [Recommendation(time=to_datetime(t), replicas=n) for t, n in memory.recent],
            "last_sample_time": None if memory.last_load is None else to_datetime(memory.last_load),
        }
    )


@dataclass(frozen=True, slots=True)
class Scaling:
    replicas: int
    kept: ServiceLoadStatus | None
    """The ServiceLoad status to save when an observation was used (None: nothing new to keep)."""


class Autoscaler:
    """The replica counts of services, each with its memory (restored once from its ServiceLoad)."""

    def __init__(self, config: AutoscalerConfig | None = None) -> None:
        self.config = config or AutoscalerConfig()
        self.memory: dict[Hashable, ScalerMemory] = {}

    def forget(self, key: Hashable) -> None:
        self.memory.pop(key, None)

    def desired(
        self,
        key: Hashable,
        spec: InferenceServiceSpec,
        *,
        current: int,
        ready: int,
        load: LoadSample | None,
        kept: ServiceLoadStatus | None,
        now: float,
    ) -> Scaling:
        """How many replicas the service wants now; `current` is the count it was last given."""
        targets = ScalingTargets.of(spec)
        if not targets.enabled:
            return Scaling(targets.low, None)
        memory = self.memory.get(key)
        if memory is None:
            memory = self.memory[key] = restore(kept)
        result = recommend(
            targets=targets,
            current=current,
            ready=ready,
            load=load,
            memory=memory,
            now=now,
            config=self.config,
        )
        if not result.fresh:
            return Scaling(result.replicas, None)
        return Scaling(result.replicas, remembered(kept or ServiceLoadStatus(), memory))


# ----------------------------------------------------------------------------------- rollout
class ServiceReplica(Replica, Protocol):
    """A replica as the rollout sees it: `serving.Replica` and the revision it serves."""

    @property
    def revision(self) -> str: ...


R = TypeVar("R", bound=ServiceReplica)


@dataclass(frozen=True, slots=True)
class Step(Generic[R]):
    target: str
    """The revision replicas are added for."""
    missing: str | None
    """A requested ModelVersion that does not exist (the service keeps serving what it runs)."""
    create: int
    first_index: int
    """The index of the first replica to add (the next ones follow it)."""
    remove: list[R]
    kept: list[R]
    """The replicas left once `remove` are gone."""

    @property
    def rolling(self) -> bool:
        """Whether replicas of another revision remain."""
        return any(r.revision != self.target for r in self.kept)


def rollout_step(
    spec: InferenceServiceSpec,
    replicas: Sequence[R],
    *,
    desired: int,
    exists: bool,
    taken: Iterable[int] = (),
) -> Step[R]:
    """This round's step toward `desired` replicas of the version `spec.modelVersion` names.

    `exists`: whether that ModelVersion exists; `taken`: indices still in use by replicas that are
    going away (a new replica must not reuse their names)."""
    wanted = spec.model_version or NO_VERSION
    target, missing = choose_revision(
        wanted=wanted, exists=exists or wanted == NO_VERSION, current=[r.revision for r in replicas]
    )
    new = [r for r in replicas if r.revision == target]
    old = [r for r in replicas if r.revision != target]
    rollout = spec.rollout
    plan = plan_rollout(
        desired=desired,
        new=new,
        old=old,
        max_surge=rollout.max_surge,
        max_unavailable=rollout.max_unavailable,
    )
    first = max([*taken, *(r.index for r in replicas)], default=-1) + 1
    gone = {id(r) for r in plan.remove}
    kept = [r for r in [*new, *old] if id(r) not in gone]
    return Step(target, missing, plan.create, first, plan.remove, kept)


# ------------------------------------------------------------------------------------ status
@dataclass(frozen=True, slots=True)
class ServiceObserved:
    generation: int | None
    minimum: int
    desired: int
    ready: int
    target: str
    missing: str | None
    rolling: bool
    pending: PendingReason | None
    """Why replicas wait, reported while none is ready."""
    suspended: bool = False
    """`spec.suspend` is true: no replica is wanted."""
    placed: int = 0
    """Replicas holding GPUs (placed, ready or not)."""
    per_replica: float = 0.0
    """GPUs one replica holds (`api.accounting.gpus_per_worker`)."""


def desired_replicas(service: InferenceService, autoscaled: int) -> int:
    """The replicas to run: the autoscaler's count, or none while the service is suspended (below its
    minimum: a suspension releases every GPU, as a suspended job's)."""
    return 0 if service.spec.suspend else autoscaled


def observe(
    service: InferenceService, step: Step[R], *, desired: int, pending: PendingReason | None
) -> ServiceObserved:
    """What the status is derived from once this round's rollout step is taken."""
    return ServiceObserved(
        generation=service.metadata.generation,
        minimum=service.spec.replicas.min,
        desired=desired,
        ready=sum(r.ready for r in step.kept),
        target=step.target,
        missing=step.missing,
        rolling=step.rolling,
        pending=pending,
        suspended=service.spec.suspend,
        placed=sum(r.placed for r in step.kept),
        per_replica=accounting.gpus_per_worker(service.spec.replica.to_dict()),
    )


def service_status(
    previous: InferenceServiceStatus, observed: ServiceObserved, *, now: datetime
) -> InferenceServiceStatus:
    """Counts, phase (Running once a replica is ready), and the Ready and RolledOut conditions."""
    ready, desired = observed.ready, observed.desired
    status = previous.model_copy(deep=True)
    status.observed_generation = observed.generation
    status.desired_replicas = desired
    status.ready_replicas = ready
    status.phase = "Running" if ready else "Pending"
    status.pending_reason = None if ready else observed.pending
    enough = ready >= observed.minimum
    available = Condition(
        type="Ready",
        status="True" if enough and ready else "False",
        reason="MinimumReplicasReady" if enough else "ReplicasNotReady",
        message=f"{ready}/{desired} replicas ready",
    )
    status.conditions = set_condition(status.conditions, available, now=now)
    status.conditions = set_condition(status.conditions, _rolled_out(observed), now=now)
    status.conditions = jobstate.suspended_condition(status.conditions, observed.suspended, now)
    _count_gpu_hours(status, observed, now)
    if observed.suspended:
        status.phase = jobstate.SUSPENDED
        status.pending_reason = None
    return status


def _count_gpu_hours(status: InferenceServiceStatus, observed: ServiceObserved, now: datetime) -> None:
    """The replica-count history as its integral (`api.accounting.service_usage`): brought up to `now`
    only when the GPUs the placed replicas hold change, so time passing alone writes nothing."""
    counted = status.gpu_hours_counted_time
    rate = round(observed.placed * observed.per_replica, 6)
    if counted is not None and rate == status.placed_gpus:
        return
    status.gpu_hours, status.placed_gpus = accounting.service_usage(
        hours=status.gpu_hours,
        placed_gpus=status.placed_gpus,
        counted_at=None if counted is None else counted.timestamp(),
        now=now.timestamp(),
        replicas=observed.placed,
        per_replica=observed.per_replica,
    )
    status.gpu_hours_counted_time = now


def _rolled_out(observed: ServiceObserved) -> Condition:
    if observed.missing is not None:
        return Condition(
            type="RolledOut",
            status="False",
            reason="ModelVersionNotFound",
            message=f"no ModelVersion {observed.missing}",
        )
    if observed.rolling:
        return Condition(
            type="RolledOut", status="False", reason="RollingOut", message=f"to {observed.target}"
        )
    return Condition(type="RolledOut", status="True", reason="Complete", message=f"serving {observed.target}")


def service_events(old: InferenceServiceStatus, new: InferenceServiceStatus) -> list[Notice]:
    """The Events announcing a change of status: a new desired replica count."""
    if new.desired_replicas == old.desired_replicas:
        return []
    return [Notice("Scaled", f"desired replicas {old.desired_replicas} -> {new.desired_replicas}")]
