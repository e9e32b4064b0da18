"""The steps of a workload's life as its trace records them, said once for both worlds.

Two places see a workload's life, in every world: the cycle loop (`controllers.decisions`) sees the
scheduler's decisions (admitted, placed, preempted) and each world's carrier the bind; the TrainingJob
logic (`controllers.jobstate`, run by the embedded controller and the Kubernetes operator alike) sees
the job's status change (submitted, queued, running, checkpointed, restarted, finished). Each calls
here, with the uid its world names the workload by (`observability.tracing` derives the trace from
it), and every step lands in the one trace of the workload.

Nothing here runs unless tracing is on: callers test `tracing.enabled()` first, so the scheduling
loop pays one test per cycle when it is off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpufleet.api.training import TrainingJobStatus
from gpufleet.observability import tracing
from gpufleet.scheduler.explain import Admit, Preempt

if TYPE_CHECKING:
    from opentelemetry.trace import Link

Fields = dict[str, tracing.AttributeValue]

FINISHED = ("Succeeded", "Failed")
BACKOFF = "Backoff"


def admitted(
    uid: str | None,
    admit: Admit,
    *,
    queue: str,
    cycle: int,
    now: float,
    links: Sequence[Link] = (),
) -> None:
    """The scheduler admitted the workload (its quota) and placed it (its nodes) in `cycle`."""
    nodes = sorted(set(admit.nodes))
    common: Fields = {"gpufleet.workload": admit.workload, "gpufleet.queue": queue, "gpufleet.cycle": cycle}
    flavors = sorted(admit.assignment.usage)
    tracing.step(uid, "admitted", at=now, attributes={**common, "gpufleet.flavors": flavors}, links=links)
    placed: Fields = {**common, "gpufleet.nodes": nodes, "gpufleet.pods": len(admit.allocations)}
    if admit.assignment.model:
        placed["gpufleet.gpu_model"] = admit.assignment.model
    tracing.step(uid, "placed", at=now, attributes=placed, links=links)


def preempted(
    uid: str | None,
    preempt: Preempt,
    *,
    queue: str,
    cycle: int,
    now: float,
    links: Sequence[Link] = (),
) -> None:
    """The scheduler evicted the workload (or shrank it, `whole` false) for `preempt.preemptor`."""
    attributes: Fields = {
        "gpufleet.workload": preempt.victim,
        "gpufleet.queue": queue,
        "gpufleet.cycle": cycle,
        "gpufleet.preemptor": preempt.preemptor,
        "gpufleet.cause": preempt.cause,
        "gpufleet.whole": preempt.whole,
        "gpufleet.message": preempt.message,
    }
    tracing.step(uid, "preempted", at=now, attributes=attributes, links=links)


def bound(uid: str | None, *, workload: str, nodes: Sequence[str], pods: int, now: float) -> None:
    """The world wrote the placement: the pods are bound to their nodes (created bound, embedded)."""
    attributes: Fields = {
        "gpufleet.workload": workload,
        "gpufleet.nodes": sorted(set(nodes)),
        "gpufleet.pods": pods,
    }
    tracing.step(uid, "bound", at=now, attributes=attributes)


def job_changed(
    uid: str | None,
    old: TrainingJobStatus,
    new: TrainingJobStatus,
    *,
    job: str,
    queue: str,
    submitted_at: float | None,
    why: str | None,
    now: float,
) -> None:
    """The steps a TrainingJob's change of status from `old` to `new` shows, in the order they
    happened (a world that reads the job rarely may see several at once):

    submitted (its first status), restarted (a disruption ended an attempt; `why`), checkpointed
    (a newer checkpoint), queued (waiting for the scheduler, a backoff over), running (every worker
    runs, again after a restart), finished (Succeeded or Failed: also the trace's root span, from
    `submitted_at`)."""
    common: Fields = {"gpufleet.job": job, "gpufleet.queue": queue}
    first = old.observed_generation is None and new.observed_generation is not None
    if first:
        tracing.step(uid, "submitted", at=now, attributes=common)
    if new.restarts > old.restarts:
        restarted: Fields = {
            **common,
            "gpufleet.restarts": new.restarts,
            "gpufleet.lost_gpu_seconds": new.lost_gpu_seconds,
        }
        if why:
            restarted["gpufleet.reason"] = why
        tracing.step(uid, "restarted", at=now, attributes=restarted)
    ref = new.last_checkpoint
    if ref is not None and (old.last_checkpoint is None or old.last_checkpoint.name != ref.name):
        checkpointed: Fields = {**common, "gpufleet.checkpoint": ref.name or ""}
        if ref.step is not None:
            checkpointed["gpufleet.checkpoint.step"] = ref.step
        tracing.step(uid, "checkpointed", at=now, attributes=checkpointed)
    if _queued(new) and (first or new.restarts > old.restarts or not _queued(old)):
        reason = new.pending_reason.type if new.pending_reason is not None else ""
        tracing.step(uid, "queued", at=now, attributes={**common, "gpufleet.reason": reason})
    if new.phase == "Running" and (old.phase != "Running" or new.restarts > old.restarts):
        tracing.step(uid, "running", at=now, attributes={**common, "gpufleet.replicas": new.ready_replicas})
    if new.phase in FINISHED and old.phase not in FINISHED:
        done: Fields = {**common, "gpufleet.phase": new.phase, "gpufleet.restarts": new.restarts}
        tracing.finished(
            uid, submitted_at=submitted_at if submitted_at is not None else now, at=now, attributes=done
        )


def log_fields(workload: str, *, queue: str | None = None, uid: str | None = None) -> dict[str, object]:
    """The context fields of a log line about a workload (`observability.logs`): its name, its queue
    and the id of its trace, which is derived from the uid whether tracing is on or not, so a line
    found in the logs leads to the trace and back."""
    fields: dict[str, object] = {"workload": workload}
    if queue:
        fields["queue"] = queue
    if uid:
        fields["trace_id"] = tracing.trace_id(uid)
    return fields


def _queued(status: TrainingJobStatus) -> bool:
    """Waiting for the scheduler: pending, and not in a restart's backoff."""
    reason = status.pending_reason
    return status.phase == "Pending" and (reason is None or reason.type != BACKOFF)
