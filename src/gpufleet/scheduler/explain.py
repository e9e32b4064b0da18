"""Pending reasons and decisions: the scheduler's answer to "why is my job pending?" and "who evicted me?".

Every workload the cycle leaves pending carries exactly one reason, built here so the wording and the
numbers are the same wherever they appear (scenario output, status.pendingReason, the CLI).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.fleet.state import Allocation
from gpufleet.scheduler.flavors import Assignment
from gpufleet.scheduler.placement.dra.result import ClaimAllocation
from gpufleet.scheduler.placement.result import NoFit
from gpufleet.scheduler.quota import QuotaShortfall

QUOTA_EXCEEDED = "QuotaExceeded"
NO_FIT = "NoFit"
WAITING_FOR_PREEMPTION = "WaitingForPreemption"
QUEUED = "Queued"
SCHEDULING_ERROR = "SchedulingError"


@dataclass(frozen=True, slots=True)
class Reason:
    """`type` is one of the constants above; `details` carries the numbers behind the message."""

    type: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, **dict(self.details)}


def quota_exceeded(short: QuotaShortfall) -> Reason:
    return Reason(QUOTA_EXCEEDED, short.message(), short.details())


def user_limit_exceeded(*, queue: str, user: str, used: int, requested: int, limit: int) -> Reason:
    message = (
        f"queue {queue} user {user}: requested {requested / 1000:g} GPUs, holds {used / 1000:g}, "
        f"per-user limit {limit / 1000:g}"
    )
    details = {
        "queue": queue,
        "user": user,
        "used": used / 1000,
        "requested": requested / 1000,
        "limit": limit / 1000,
        "scope": "user",
    }
    return Reason(QUOTA_EXCEEDED, message, details)


def no_fit(found: NoFit) -> Reason:
    details = found.to_reason()
    details.pop("type", None)
    details.pop("message", None)
    return Reason(NO_FIT, found.message, details)


def no_flavor(workload: str, queue: str, models: Sequence[str]) -> Reason:
    wanted = ", ".join(models) if models else "any GPU model"
    message = f"queue {queue} has no quota for the flavors {workload} accepts ({wanted})"
    return Reason(QUOTA_EXCEEDED, message, {"queue": queue, "flavors": list(models), "nominal": 0})


def no_model_node(workload: str, models: Sequence[str]) -> Reason:
    """A workload of an unlimited queue with no GPU model to try: the fleet has no node it accepts yet.

    Quota is not what is missing (the queue has no limit), nodes are: NoFit, so that pools can be grown
    for it, and the workload is looked at again once a node of a new GPU model joins."""
    wanted = ", ".join(models) if models else "any GPU model"
    message = f"no node of an accepted GPU model exists ({workload} accepts {wanted})"
    return Reason(NO_FIT, message, {"models": list(models), "nodes": 0})


def waiting_for_preemption(victims: Sequence[str]) -> Reason:
    message = "waiting for " + ", ".join(victims) + " to be preempted"
    return Reason(WAITING_FOR_PREEMPTION, message, {"victims": list(victims)})


def waiting_for_capacity(pods: Sequence[str]) -> Reason:
    """Fits once these pods, still holding their node's resources on their way out, are gone: it waits
    for them rather than choosing new victims (capacity to come)."""
    shown = ", ".join(pods[:_NAMED]) + (f" and {len(pods) - _NAMED} more" if len(pods) > _NAMED else "")
    count = f"{len(pods)} terminating pod" + ("" if len(pods) == 1 else "s")
    message = f"waiting for the capacity of {count}: {shown}"
    return Reason(WAITING_FOR_PREEMPTION, message, {"terminating": list(pods)})


_NAMED = 5
"""Terminating pods named in a reason's message (details name them all)."""


def scheduling_error(exc: Exception) -> Reason:
    """The workload could not be decided on: an error its request caused, named so its owner can act."""
    text = f"{type(exc).__name__}: {exc}"
    message = "this workload cannot be scheduled: " + (text if len(text) <= 300 else text[:300] + "...")
    return Reason(SCHEDULING_ERROR, message, {"error": type(exc).__name__})


def queued(*, queue: str) -> Reason:
    """Behind the head of a StrictFIFO queue. The head is not named: a queue of N workloads would
    otherwise be rewritten N times each time its head changes (and, on Kubernetes, every pod's
    condition patched and an Event sent); the head says for itself why it cannot start."""
    message = f"waiting its turn in StrictFIFO queue {queue}: only the head is tried, and it cannot start yet"
    return Reason(QUEUED, message, {"queue": queue})


@dataclass(frozen=True, slots=True)
class Admit:
    """Admit `workload` with `assignment`; its pods take `allocations`."""

    workload: str
    assignment: Assignment
    allocations: tuple[Allocation, ...]
    nodes: tuple[str, ...]
    claims: tuple[tuple[ClaimAllocation, ...], ...] = ()
    """DRA, per pod as `allocations`: each of its claims' allocation, for the claim's status (empty when
    no pod has claims)."""


@dataclass(frozen=True, slots=True)
class Preempt:
    """Evict `victim` (or only `pods` of it, shrinking an elastic workload to `counts`) for `preemptor`."""

    victim: str
    preemptor: str
    cause: str
    message: str
    lost_gpu_seconds: float
    pods: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()

    @property
    def whole(self) -> bool:
        return not self.pods


@dataclass(frozen=True, slots=True)
class Pending:
    workload: str
    reason: Reason
