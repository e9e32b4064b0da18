"""Who counts a run ended in the Kubernetes world, and in which words (`api.evictions`).

One place per eviction, so `gpufleet_evictions_total` never counts a run twice:

- a TrainingJob's attempt is counted by the operator when it ends the attempt (`kube.training`),
  whatever broke it: the scheduler's preemption, a drain, a failed or deleted worker. Only the
  operator sees every one of those, and it sees each once (the attempt's pods are then replaced);
- every other gang the scheduler preempts whole (plain Pods, Jobs, InferenceService replicas) is
  counted by the scheduler when it evicts the gang's last member (`kube.scheduler`): nobody else
  watches those runs end;
- every other gang's run ended by something else (a drain, a lost node, a failed GPU) is counted by
  the scheduler too, when its first member stops (`kube.runends`), with the reason `run_end_reason`
  reads from that pod and its node.

A pod's `DisruptionTarget` reason is read into the shared vocabulary here: gpufleet's own drains
(`kube.fleet`), Kubernetes' controllers and older schedulers wrote other words for the same causes.
"""

from __future__ import annotations

from gpufleet.api import evictions
from gpufleet.api.resource import GROUP
from gpufleet.kube.config import GPU_HEALTH_CONDITION
from gpufleet.kube.fleet import HEALTH_REASON, SPOT_REASON, unhealthy_reason
from gpufleet.kube.transport import Json

TAINT_MANAGER = "DeletionByTaintManager"
"""The reason Kubernetes' taint manager gives a pod it deletes from a node with a NoExecute taint."""
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"

# Kubernetes-world words for causes the vocabulary names. `PreemptedByGpufleet` is what schedulers
# before the shared vocabulary wrote; `PreemptionByScheduler` is kube-scheduler's, preempting one of
# our pods for a pod of its own; `GPUUnhealthy` is what the operator's GPU health drain writes
# (`kube.fleet`, whose cordon annotations say `spot-interruption` and `gpu-health`); the pod garbage
# collector deletes the pods of a Node object that is gone (`DeletionByPodGC`).
_TRANSLATED = {
    "PreemptedByGpufleet": evictions.PREEMPTED,
    "PreemptionByScheduler": evictions.PREEMPTED,
    SPOT_REASON: evictions.SPOT_INTERRUPTION,
    HEALTH_REASON: evictions.NODE_UNHEALTHY,
    GPU_HEALTH_CONDITION: evictions.NODE_UNHEALTHY,
    "DeletionByPodGC": evictions.NODE_LOST,
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


def _disruption_target(pod: Json) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or "")
    return None


def run_end_reason(pod: Json, node: Json | None) -> str | None:
    """Why a bound pod of ours stopped running, in the shared words, when a disruption stopped it; None
    when none did (it succeeded, its own program failed, or someone deleted it).

    1. Its node gone (the Node object deleted under it): `NodeLost`.
    2. Its node tainted `node.kubernetes.io/unreachable` (`NodeLost`) or `not-ready` (`NodeNotReady`),
       where the taint manager deleted it (or nothing else says why it stopped).
    3. Its `DisruptionTarget` reason, read by `eviction_reason`.
    4. Failed on a node whose GPUs are unhealthy (`kube.fleet.unhealthy_reason`): `GPUFailure`; failed
       with the node controller's `NodeLost`: that; with another reason of the kubelet's (`Evicted`,
       `Terminated`, ...): that reason as it is; with none, its program failed: None.
    """
    target = _disruption_target(pod)
    if node is None:
        return evictions.NODE_LOST if target is None else eviction_reason(target)
    taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
    # The taint manager's deletion; also one seen without its condition (a watch that missed the write).
    if target in (TAINT_MANAGER, None) and UNREACHABLE_TAINT in taints:
        return evictions.NODE_LOST
    if target in (TAINT_MANAGER, None) and NOT_READY_TAINT in taints:
        return evictions.NODE_NOT_READY
    if target is not None:
        return eviction_reason(target)
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    if status.get("reason") == evictions.NODE_LOST:
        return evictions.NODE_LOST
    if unhealthy_reason(node) is not None:
        return evictions.GPU_FAILURE
    return str(status["reason"]) if status.get("reason") else None
