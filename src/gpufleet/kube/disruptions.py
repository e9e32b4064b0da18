"""Who counts a run ended in the Kubernetes world, and in which words (`api.evictions`).

One place per eviction, so `gpufleet_evictions_total` never counts a run twice:

- a TrainingJob's attempt is counted by the operator when it ends the attempt (`kube.training`),
  whatever broke it: the scheduler's preemption, a drain, a failed or deleted worker. Only the
  operator sees every one of those, and it sees each once (the attempt's pods are then replaced);
- every other gang the scheduler preempts whole (plain Pods, Jobs, InferenceService replicas) is
  counted by the scheduler when it evicts the gang's last member (`kube.scheduler`): nobody else
  watches those runs end.

A pod's `DisruptionTarget` reason is read into the shared vocabulary here: gpufleet's own drains
(`kube.fleet`) and older schedulers wrote other words for the same causes.
"""

from __future__ import annotations

from gpufleet.api import evictions
from gpufleet.api.resource import GROUP
from gpufleet.kube.fleet import HEALTH_REASON, SPOT_REASON
from gpufleet.kube.transport import Json

# Kubernetes-world words for causes the vocabulary names. `PreemptedByGpufleet` is what schedulers
# before the shared vocabulary wrote; `PreemptionByScheduler` is kube-scheduler's, preempting one of
# our pods for a pod of its own.
_TRANSLATED = {
    "PreemptedByGpufleet": evictions.PREEMPTED,
    "PreemptionByScheduler": evictions.PREEMPTED,
    SPOT_REASON: evictions.SPOT_INTERRUPTION,
    HEALTH_REASON: evictions.NODE_UNHEALTHY,
}


def eviction_reason(reason: str) -> str:
    """A pod condition's reason in the shared vocabulary; Kubernetes' own others as they are."""
    return _TRANSLATED.get(reason, reason)


def counted_by_operator(pods: list[Json]) -> bool:
    """Whether these pods are a TrainingJob's workers, whose attempt's end the operator counts."""
    return any(
        ref.get("kind") == "TrainingJob" and str(ref.get("apiVersion", "")).partition("/")[0] == GROUP
        for pod in pods
        for ref in pod["metadata"].get("ownerReferences") or []
    )
