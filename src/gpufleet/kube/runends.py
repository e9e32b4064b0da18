"""Runs of the scheduler's gangs ended by something other than its own preemption, counted once.

A plain Pod, a Job's gang or an InferenceService replica is a workload only the scheduler follows (a
TrainingJob's attempts are the operator's to count, `kube.disruptions`). When one of its bound pods
stops running (it fails, or is deleted or evicted) the gang's run is over; if a disruption stopped it,
`gpufleet_evictions_total{queue, reason}` counts that run once, with the reason
`disruptions.run_end_reason` reads from the pod and its node: a drain (`SpotInterruption`,
`NodeUnhealthy`, or Kubernetes' own `EvictionByEvictionAPI` for a `kubectl drain`), a lost node
(`NodeLost`, `NodeNotReady`), a failed GPU (`GPUFailure`).

The informer handler only notes the pods that stopped, with their last state; each pass decides on the
notes of the pass before. The wait is for the eviction's writer: the Eviction API marks a pod with its
own reason (`EvictionByEvictionAPI`) and whoever asked for the eviction (the operator's drain, this
scheduler's preemption) writes its reason over it just after, so the reason is read once that write has
had time to arrive. The pods this scheduler preempts are told to it (`preempting`) and left out: their
runs are counted when the preemption is decided (`KubeScheduler._preempt`).

Once per run: the first member of a gang to stop counts the run and names the gang's other members
then bound; those are passed over when they stop in turn. Only the leader's passes count, and a new
term starts with no notes, so a run is counted by one replica.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.api import evictions
from gpufleet.kube import disruptions
from gpufleet.kube import pods as kube_pods
from gpufleet.kube.config import QUEUE_LABEL, KubeConfig
from gpufleet.kube.informer import key_of
from gpufleet.kube.transport import Json
from gpufleet.observability import metrics

MAX_NOTES = 10_000
"""Stopped pods noted and not yet decided on; past it the oldest are dropped (a standby replica, whose
passes do not run, keeps no more than this)."""


@dataclass(slots=True)
class _Stopped:
    pod: Json
    """Its latest state, updated by the events that follow until the note is decided."""
    node: str
    gang: str
    queue: str
    gang_size: int
    passes: int = 0


def _uid(pod: Json) -> str:
    return str(pod["metadata"].get("uid") or key_of(pod))


def _slim(pod: Json) -> Json:
    """What deciding needs of a stopped pod: its namespace and why it stopped (a note may wait a while)."""
    status = pod.get("status") or {}
    return {
        "metadata": {"namespace": pod["metadata"].get("namespace")},
        "status": {k: status[k] for k in ("phase", "reason", "conditions") if k in status},
    }


def _running(pod: Json | None) -> bool:
    return pod is not None and kube_pods.holds_resources(pod) and not pod["metadata"].get("deletionTimestamp")


def _as_running(pod: Json) -> Json:
    """The pod as it was while it ran, for its gang membership (which a stopped pod no longer has)."""
    meta = {k: v for k, v in pod["metadata"].items() if k != "deletionTimestamp"}
    return {**pod, "metadata": meta, "status": {**(pod.get("status") or {}), "phase": "Running"}}


class RunEnds:
    """Counts the disrupted runs of the scheduler's own gangs; `pod_changed` is an informer handler."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        pods: Callable[[], list[Json]],
        node: Callable[[str], Json | None],
        jobs: Callable[[], Mapping[str, Json]],
    ) -> None:
        self._config = config
        self._pods = pods
        self._node = node
        self._jobs = jobs
        self._lock = threading.Lock()
        self._notes: dict[str, _Stopped] = {}
        self._counted: set[str] = set()
        """Pods of runs already counted that still ran then: their stop is not a run's end."""
        self._ours: set[str] = set()
        """Pods this scheduler asked to evict for a preemption."""

    def preempting(self, pod: Json) -> None:
        """A pod the scheduler is about to evict for a preemption: its run is counted there."""
        with self._lock:
            self._ours.add(_uid(pod))

    def clear(self) -> None:
        """A new term: what was noted before it is the previous leader's to count."""
        with self._lock:
            self._notes.clear()
            self._counted.clear()
            self._ours.clear()

    def pod_changed(self, event: str, old: Json | None, new: Json | None) -> None:
        last = new if new is not None else old
        if last is None:
            return
        uid = _uid(last)
        with self._lock:
            note = self._notes.get(uid)
            if note is not None:
                note.pod = _slim(last)  # the reason its evictor writes after the Eviction API's own
                return
            if not (old is not None and _running(old) and not _running(new)):
                if new is None:  # gone without a stop noted: nothing left to pass over
                    self._ours.discard(uid)
                    self._counted.discard(uid)
                return
            if not kube_pods.is_ours(old, self._config) or disruptions.counted_by_operator([old]):
                return
            member = kube_pods.membership(old, self._config, self._jobs())
            if member is None:
                return
            queue = (old["metadata"].get("labels") or {}).get(QUEUE_LABEL, self._config.default_queue)
            node = str(old["spec"]["nodeName"])
            self._notes[uid] = _Stopped(_slim(last), node, member.key, queue, member.size)
            while len(self._notes) > MAX_NOTES:
                self._notes.pop(next(iter(self._notes)))

    def count(self) -> None:
        """Decides on the notes a pass has passed since they were taken: each disrupted run once."""
        with self._lock:
            ready = [uid for uid, note in self._notes.items() if note.passes >= 1]
            for note in self._notes.values():
                note.passes += 1
            decided = [(uid, self._notes.pop(uid)) for uid in ready]
        ended: set[str] = set()
        for uid, note in decided:
            with self._lock:
                passed_over = uid in self._ours or uid in self._counted or note.gang in ended
                self._ours.discard(uid)
                self._counted.discard(uid)
            if passed_over:
                continue
            reason = disruptions.run_end_reason(note.pod, self._node(note.node))
            if reason is None or reason == evictions.PREEMPTED:
                continue
            metrics.record_eviction(note.queue, reason)
            if note.gang_size > 1:
                ended.add(note.gang)  # its other members stopped in the same breath
                others = self._members(note.gang, note.pod) - {uid}
                with self._lock:
                    others |= {u for u, n in self._notes.items() if n.gang == note.gang}
                    self._counted |= others

    def _members(self, gang: str, pod: Json) -> set[str]:
        """The pods of the gang still bound (running or stopping), as noted by the pods informer."""
        namespace = pod["metadata"].get("namespace") or "default"
        jobs = self._jobs()
        out = set()
        for other in self._pods():
            if (other["metadata"].get("namespace") or "default") != namespace or not kube_pods.is_bound(
                other
            ):
                continue
            member = kube_pods.membership(_as_running(other), self._config, jobs)
            if member is not None and member.key == gang:
                out.add(_uid(other))
        return out
