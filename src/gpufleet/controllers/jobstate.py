"""What a TrainingJob's state is, whatever world runs its workers.

Shared by the embedded TrainingJob controller and the Kubernetes operator, so both worlds resume from
the same checkpoint, give up at the same count and say the same in status, conditions and events:

- `latest_checkpoint`: the checkpoint a restart resumes from;
- `worker_broken`: whether a worker's state ends its attempt (a disruption);
- `restart_decision`: what follows a disruption: restart now, restart once the backoff is over, or give
  up past `restartPolicy.maxRestarts` (docs/scheduling.md decision 24);
- `job_status`: the job's next status from what its world observed (its current attempt's workers,
  the disruptions that ended earlier attempts, whether the job gave up, why it waits);
- `job_events`: the Events a change of status is announced with;
- `record_metrics`: the job's Prometheus series, from that status (`forget_metrics` when it is gone).

Each world translates what it reads (the embedded store's Workload and Pods; the API's pods) into an
`Observed` and renders the status back (the store's object; a merge patch).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from gpufleet.api import evictions
from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.meta import Condition, PendingReason, set_condition
from gpufleet.api.status import CheckpointRef
from gpufleet.api.training import TrainingJobStatus
from gpufleet.controllers.notice import Notice
from gpufleet.observability import metrics

FINISHED = ("Succeeded", "Failed")
QUEUED = PendingReason(type="Queued", message="waiting for the scheduler")
SUSPENDED: Final = evictions.SUSPENDED
"""The phase, condition and eviction reason of a job whose `spec.suspend` is true (the eviction
reason is the shared vocabulary's, `api.evictions`)."""


def latest_checkpoint(checkpoints: Iterable[Checkpoint], job: str) -> Checkpoint | None:
    """The newest complete checkpoint of `job` (by time, then step)."""
    done = [c for c in checkpoints if c.spec.job == job and c.status.phase == "Complete"]
    return max(done, key=_order, default=None)


def _order(ckpt: Checkpoint) -> tuple[float, int]:
    return (ckpt.spec.time.timestamp() if ckpt.spec.time else float("-inf"), ckpt.spec.step)


def checkpoint_ref(ckpt: Checkpoint) -> CheckpointRef:
    return CheckpointRef(name=ckpt.name, step=ckpt.spec.step, time=ckpt.spec.time, uri=ckpt.spec.uri)


def restart_allowed(*, restarts: int, max_restarts: int | None) -> bool:
    """Whether a job that has restarted `restarts` times may restart once more."""
    return max_restarts is None or restarts < max_restarts


# ------------------------------------------------------------------------------ disruptions
def worker_broken(*, phase: str | None, deleted: bool) -> bool:
    """Whether a worker in this state ends its attempt: it failed, or it was deleted (evicted,
    drained, its node lost) before it succeeded. A worker deleted after its work was done ends
    nothing; neither does one only marked a disruption target (its eviction may still be refused by a
    disruption budget)."""
    return phase == "Failed" or (deleted and phase != "Succeeded")


# ------------------------------------------------------------------------------------ status
@dataclass(frozen=True, slots=True)
class Workers:
    """The current attempt's workers, as the world running them counts them."""

    expected: int
    """How many workers the attempt runs with (what the scheduler admitted, or the spec's replicas)."""
    placed: int
    """Workers holding capacity now (`status.replicas`)."""
    running: int
    succeeded: int
    admitted: bool
    """Whether the whole gang holds its capacity."""

    @classmethod
    def of(cls, phases: Iterable[str | None], *, expected: int, placed: int, admitted: bool) -> Workers:
        """The attempt's workers from the phases of its pods."""
        seen = list(phases)
        return cls(expected, placed, seen.count("Running"), seen.count("Succeeded"), admitted)


@dataclass(frozen=True, slots=True)
class Disruption:
    """What ended an attempt: an eviction (preemption, node or GPU loss, spot) or a failed worker."""

    reason: str
    message: str = ""
    at: float | None = None
    """When the world recorded it (seconds), as it keeps it; None where it does not know."""

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}".rstrip(": ")


Verdict = Literal["Restart", "Backoff", "GiveUp"]


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """What follows the latest disruption of a job."""

    verdict: Verdict
    """`Restart` now, `Backoff` until `at`, or `GiveUp` (the job fails)."""
    restarts: int
    """Attempts ended by a disruption, the latest included (`status.restarts`)."""
    at: float | None
    """When the next attempt may start (`now` for `Restart`); None for `GiveUp`."""
    reason: str
    """Why, for a status: the disruption and the backoff, or the restart limit it went past."""


def restart_decision(
    *,
    restarts: int,
    last: Disruption | None,
    max_restarts: int | None,
    backoff_seconds: float,
    now: float,
) -> RestartDecision:
    """The one rule both worlds follow after a disruption, from what each observed: `restarts`, the
    attempts ended by a disruption so far, the latest included (the embedded world counts its
    workload's recorded evictions, the Kubernetes one its job's `status.restarts`); `last`, that
    disruption with the time the world recorded it; the job's restart policy; and `now`, the time of
    the question (this module reads no clock). Each world asks when an attempt ends and again while
    the job waits, so a policy changed in between applies.

    1. More disruptions than `maxRestarts` allows restarts (`restart_allowed` for the restarts before
       the latest): give up.
    2. Else the next attempt may start `backoffSeconds` after the disruption was recorded: while that
       is to come, restart then (`Backoff`).
    3. Else (no backoff, the backoff over, or the disruption's time unknown): restart now.
    """
    if restarts > 0 and not restart_allowed(restarts=restarts - 1, max_restarts=max_restarts):
        return RestartDecision("GiveUp", restarts, None, limit_message(restarts, last))
    reason = f"{last}; requeued after {backoff_seconds:g}s" if last is not None else "not disrupted"
    if backoff_seconds > 0 and last is not None and last.at is not None:
        at = last.at + backoff_seconds
        if at > now:
            return RestartDecision("Backoff", restarts, at, reason)
    return RestartDecision("Restart", restarts, now, reason)


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything a job's status is derived from, read by its world."""

    generation: int | None
    checkpoint: Checkpoint | None
    workers: Workers
    disruptions: int
    """Attempts ended by a disruption so far (`status.restarts`), the last one included."""
    last_disruption: Disruption | None
    gave_up: bool
    """The last disruption was one more than `maxRestarts` allows: the job fails."""
    lost_gpu_seconds: float | None = None
    """GPU-seconds of work the disruptions threw away; None where the world does not measure it."""
    pending: PendingReason | None = None
    """Why the job waits; None leaves reason and Running condition to whoever writes them."""
    admitted_time: datetime | None = None
    """When the gang got its capacity, where the world knows better than `now`."""
    nodes: tuple[str, ...] = ()
    """The nodes the current attempt's workers are bound to (`status.nodes`, the NODES column)."""
    suspended: bool = False
    """`spec.suspend` is true: the job holds nothing and waits to be resumed."""


Phase = Literal["Pending", "Admitted", "Running", "Succeeded"]


def progress(workers: Workers) -> Phase:
    """Where a job that has not failed stands: done when every expected worker finished, Running
    while every worker runs or has finished (ranks end at slightly different times, and a job whose
    first ranks are done is not back to merely holding capacity), Admitted while its capacity is
    held, else Pending."""
    if workers.succeeded and workers.succeeded >= max(workers.expected, 1):
        return "Succeeded"
    if not workers.admitted:
        return "Pending"
    if workers.expected and workers.running and workers.running + workers.succeeded >= workers.expected:
        return "Running"
    return "Admitted"


def limit_message(disruptions: int, last: Disruption | None) -> str:
    message = f"disrupted {disruptions} times, more than maxRestarts allows"
    return message if last is None else f"{message}; last: {last}"


def job_status(previous: TrainingJobStatus, observed: Observed, *, now: datetime) -> TrainingJobStatus:
    """The job's status now. A finished job keeps its phase, counters and conditions (only the
    checkpoint and generation it reports follow), except that it never says it runs.

    `previous` is left as it was: the new status is a copy of its top level with the fields that
    follow replaced in one step (lists are rebuilt by `set_condition` and `sorted`, never changed in
    place). A deep copy of the conditions and their datetimes was a twentieth of a simulation's time,
    and a dozen assignments through the model's `__setattr__` a call nearly 2% more."""
    update: dict[str, object] = {"observed_generation": observed.generation}
    if observed.checkpoint is not None:
        update["last_checkpoint"] = checkpoint_ref(observed.checkpoint)
    if previous.phase in FINISHED:
        update["conditions"] = _not_running(previous.conditions, previous.phase, now)
        return previous.model_copy(update=update)
    workers = observed.workers
    update["restarts"] = observed.disruptions
    if observed.lost_gpu_seconds is not None:
        update["lost_gpu_seconds"] = round(observed.lost_gpu_seconds, 3)
    update["replicas"] = workers.placed
    update["ready_replicas"] = workers.running
    update["nodes"] = sorted(set(observed.nodes))
    if observed.gave_up:
        message = limit_message(observed.disruptions, observed.last_disruption)
        return _finish(previous, update, previous.conditions, "Failed", "RestartLimitExceeded", message, now)
    conditions = suspended_condition(previous.conditions, observed.suspended, now)
    if observed.suspended:
        update["phase"] = SUSPENDED
        update["pending_reason"] = None
        update["conditions"] = set_condition(conditions, _SUSPENDED_NOT_RUNNING, now=now)
        return previous.model_copy(update=update)
    phase = progress(workers)
    if phase == "Succeeded":
        return _finish(previous, update, conditions, "Succeeded", "Completed", "all workers finished", now)
    update["phase"] = phase
    if phase == "Pending":
        pending = previous.pending_reason
        if observed.pending is not None:
            pending = update["pending_reason"] = observed.pending
            running = Condition(type="Running", status="False", reason=pending.type, message="")
            conditions = set_condition(conditions, running, now=now)
        update["conditions"] = _not_admitted(conditions, pending or QUEUED, now)
        return previous.model_copy(update=update)
    update["pending_reason"] = None
    update["admitted_time"] = previous.admitted_time or observed.admitted_time or now
    conditions = set_condition(conditions, _ADMITTED, now=now)
    if phase == "Running":
        update["start_time"] = previous.start_time or now
        conditions = set_condition(conditions, _ALL_RUNNING, now=now)
    update["conditions"] = conditions
    return previous.model_copy(update=update)


# Conditions `job_status` sets as they are; `set_condition` places a copy of one, never the one itself.
_ADMITTED = Condition(type="Admitted", status="True", reason="Admitted", message="capacity reserved")
_ALL_RUNNING = Condition(type="Running", status="True", reason="AllWorkersRunning", message="")
_SUSPENDED_NOT_RUNNING = Condition(type="Running", status="False", reason=SUSPENDED, message="")


def suspended_condition(conditions: list[Condition], suspended: bool, now: datetime) -> list[Condition]:
    """`Suspended True` while `spec.suspend` is true; `Suspended False` (Resumed) once it is not, for a
    job or service that was suspended. One never suspended gets none."""
    if suspended:
        why = Condition(
            type=SUSPENDED,
            status="True",
            reason=SUSPENDED,
            message="spec.suspend is true: its pods are stopped and its GPUs released",
        )
        return set_condition(conditions, why, now=now)
    if not any(c.type == SUSPENDED and c.status == "True" for c in conditions):
        return conditions
    resumed = Condition(type=SUSPENDED, status="False", reason="Resumed", message="queued again")
    return set_condition(conditions, resumed, now=now)


def _not_admitted(conditions: list[Condition], why: PendingReason, now: datetime) -> list[Condition]:
    """`Admitted False` with the reason the job waits, for a job that held capacity in an earlier
    attempt (a restart, a re-queue): the new attempt holds none yet. A job never admitted gets none."""
    admitted = next((c for c in conditions if c.type == "Admitted"), None)
    if admitted is None or (admitted.status, admitted.reason) == ("False", why.type):
        return conditions
    waiting = Condition(type="Admitted", status="False", reason=why.type, message=why.message)
    return set_condition(conditions, waiting, now=now)


def _finish(
    previous: TrainingJobStatus,
    update: dict[str, object],
    conditions: list[Condition],
    phase: Literal["Succeeded", "Failed"],
    reason: str,
    message: str,
    now: datetime,
) -> TrainingJobStatus:
    """`previous` with `update` and what ending in `phase` sets (its condition added to `conditions`)."""
    update["phase"] = phase
    update["completion_time"] = now
    update["pending_reason"] = None
    update["ready_replicas"] = 0
    done = Condition(type=phase, status="True", reason=reason, message=message)
    update["conditions"] = _not_running(set_condition(conditions, done, now=now), phase, now)
    return previous.model_copy(update=update)


def _not_running(conditions: list[Condition], phase: str, when: datetime) -> list[Condition]:
    """`Running False` for a finished job: reason Completed after success, Failed after failure."""
    reason, message = (
        ("Completed", "all workers finished") if phase == "Succeeded" else ("Failed", "the job failed")
    )
    running = next((c for c in conditions if c.type == "Running"), None)
    if running is not None and (running.status, running.reason) == ("False", reason):
        return conditions
    return set_condition(
        conditions, Condition(type="Running", status="False", reason=reason, message=message), now=when
    )


# ------------------------------------------------------------------------------------ events
def job_events(
    old: TrainingJobStatus, new: TrainingJobStatus, *, why: Disruption | None = None
) -> list[Notice]:
    """The Events announcing the change from `old` to `new`: a restart (Warning), a new phase."""
    out: list[Notice] = []
    if new.restarts > old.restarts and new.phase != "Failed":
        ref = new.last_checkpoint
        where = f"step {ref.step}" if ref is not None and ref.step is not None else "the start"
        message = f"restart {new.restarts} from {where}"
        if why is not None:
            message += f" after {why}"
        if new.lost_gpu_seconds:
            message += f"; {new.lost_gpu_seconds:g} GPU-seconds lost so far"
        out.append(Notice("Restarting", message, "Warning"))
    if new.phase != old.phase:
        came_from: str = old.phase
        for phase in _passed_through(old.phase, new.phase):
            out.append(Notice(phase, f"{came_from} -> {phase}"))
            came_from = phase
    return out


FORWARD: tuple[str, ...] = ("Pending", "Admitted", "Running", "Succeeded")
"""The phases a job that is not disrupted goes through, in order."""


def _passed_through(old: str, new: str) -> list[str]:
    """The phases from `old` to `new`, each announced once: a job is only seen at the moments its
    controller looks (an admission and its workers' start at one instant, or an informer that caught
    up late), and one seen Pending and then Running was Admitted in between. Users and tools reading
    a job's Events find every step of the chain whatever the timing. Any other change is one step."""
    if old in FORWARD and new in FORWARD and FORWARD.index(new) > FORWARD.index(old):
        return list(FORWARD[FORWARD.index(old) + 1 : FORWARD.index(new) + 1])
    return [new]


def record_metrics(
    namespace: str, name: str, status: TrainingJobStatus, *, checkpoint_interval: float | None
) -> None:
    """Sets the job's series from the status its world computed: restarts, lost GPU-seconds and, while
    it runs with checkpoints configured, when it last checkpointed (its newest checkpoint, or its
    workers' start when it has taken none since) beside its interval."""
    checkpoint_at = None
    if status.phase == "Running" and checkpoint_interval:
        taken = status.last_checkpoint.time if status.last_checkpoint is not None else None
        times = [t.timestamp() for t in (taken, status.start_time) if t is not None]
        checkpoint_at = max(times, default=None)
    metrics.record_job(
        namespace,
        name,
        restarts=status.restarts,
        lost_gpu_seconds=status.lost_gpu_seconds,
        checkpoint_time=checkpoint_at,
        checkpoint_interval=checkpoint_interval,
    )


def forget_metrics(namespace: str, name: str) -> None:
    """The job is gone: so are its series."""
    metrics.forget_job(namespace, name)
