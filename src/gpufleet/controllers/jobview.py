"""What the TrainingJob controller knows of its jobs: each job, its Workload, pods and checkpoints.

The controller used to read its job, the job's workload, the job's pods (a label list) and every
checkpoint of the namespace from the store on each reconcile, several reconciles per job as its
pods start and finish: a third of a simulated day's CPU time went to that controller, much of it
parsing and validating the same objects again. This view is an informer cache like the pool
controller's (`controllers.poolview`): listed once, then fed by the events the controller receives
anyway, and caught up with the store's event log before each reconcile (`catch_up`), so a reconcile
sees what the scheduling controller and the twin wrote earlier in the same round, as the reads did.
Each event is applied once, whether it came through the manager or a catch-up; a log compacted past
the view's cursor means listing again. Pods and checkpoints are indexed per job, in name order (the
order the store lists them in), so a reconcile reads only its own job's.
"""

from __future__ import annotations

from typing import TypeVar

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.errors import GoneError
from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.runtime import Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob
from gpufleet.store.protocol import Store, WatchEvent

KINDS = ("TrainingJob", "Workload", "Pod", "Checkpoint")
CATCH_UP_BATCH = 2000

Key = tuple[str, str]
"""(namespace, name)."""
Member = TypeVar("Member", Pod, Checkpoint)


class JobView:
    """TrainingJobs, Workloads, and per job its pods and checkpoints, from one list and then events."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.jobs: dict[Key, TrainingJob] = {}
        self.workloads: dict[Key, WorkloadObject] = {}
        self._pods: dict[Key, dict[str, Pod]] = {}
        """Per job (namespace, job label), its pods by name."""
        self._pod_job: dict[Key, Key] = {}
        """Per pod, the job it is indexed under (a pod's label may change)."""
        self._checkpoints: dict[Key, dict[str, Checkpoint]] = {}
        self._checkpoint_job: dict[Key, Key] = {}
        self.cursor: int | None = None
        """The newest event applied (None: not listed yet)."""

    # ------------------------------------------------------------------ feeding
    def relist(self) -> None:
        """Lists every kind again; the events after the version read first are applied on top, so
        nothing written meanwhile is missed (applying an event twice is harmless)."""
        head = int(self.store.resource_version)
        self.jobs = {(j.namespace or "", j.name): j for j in self.store.list(TrainingJob)}
        self.workloads = {(w.namespace or "", w.name): w for w in self.store.list(WorkloadObject)}
        self._pods, self._pod_job = {}, {}
        for pod in self.store.list(Pod):
            self._put_pod(pod)
        self._checkpoints, self._checkpoint_job = {}, {}
        for checkpoint in self.store.list(Checkpoint):
            self._put_checkpoint(checkpoint)
        self.cursor = head

    def apply(self, event: WatchEvent) -> bool:
        """Applies one event unless already applied; True if it was new."""
        if self.cursor is None:
            self.relist()
        assert self.cursor is not None
        if event.resource_version <= self.cursor:
            return False
        self.cursor = event.resource_version
        obj, deleted = event.object, event.type == "DELETED"
        key = (obj.namespace or "", obj.name)
        if isinstance(obj, TrainingJob):
            if deleted:
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj
        elif isinstance(obj, WorkloadObject):
            if deleted:
                self.workloads.pop(key, None)
            else:
                self.workloads[key] = obj
        elif isinstance(obj, Pod):
            self._drop(self._pods, self._pod_job, key)
            if not deleted:
                self._put_pod(obj)
        elif isinstance(obj, Checkpoint):
            self._drop(self._checkpoints, self._checkpoint_job, key)
            if not deleted:
                self._put_checkpoint(obj)
        return True

    def catch_up(self) -> list[WatchEvent]:
        """Applies the store's events the view has not seen yet; returns them (the caller enqueues
        their keys). A log compacted past the cursor means listing again."""
        if self.cursor is None:
            self.relist()
            return []
        fresh: list[WatchEvent] = []
        while True:
            assert self.cursor is not None
            try:
                events = self.store.events_since(self.cursor, kinds=KINDS, limit=CATCH_UP_BATCH)
            except GoneError:
                self.relist()
                return fresh
            fresh += [event for event in events if self.apply(event)]
            if len(events) < CATCH_UP_BATCH:
                return fresh

    # ------------------------------------------------------------------ reads
    def pods_of(self, namespace: str, job: str) -> list[Pod]:
        """The pods labelled with the job, in name order."""
        pods = self._pods.get((namespace, job), {})
        return [pods[name] for name in sorted(pods)]

    def checkpoints_of(self, namespace: str, job: str) -> list[Checkpoint]:
        """The checkpoints of the job (`spec.job`), in name order."""
        found = self._checkpoints.get((namespace, job), {})
        return [found[name] for name in sorted(found)]

    # ------------------------------------------------------------------ internals
    def _put_pod(self, pod: Pod) -> None:
        job = pod.metadata.labels.get(JOB_LABEL)
        if job is None:
            return
        ns = pod.namespace or ""
        self._pods.setdefault((ns, job), {})[pod.name] = pod
        self._pod_job[(ns, pod.name)] = (ns, job)

    def _put_checkpoint(self, checkpoint: Checkpoint) -> None:
        ns = checkpoint.namespace or ""
        self._checkpoints.setdefault((ns, checkpoint.spec.job), {})[checkpoint.name] = checkpoint
        self._checkpoint_job[(ns, checkpoint.name)] = (ns, checkpoint.spec.job)

    @staticmethod
    def _drop(index: dict[Key, dict[str, Member]], owners: dict[Key, Key], key: Key) -> None:
        owner = owners.pop(key, None)
        if owner is None:
            return
        members = index.get(owner)
        if members is not None:
            members.pop(key[1], None)
            if not members:
                del index[owner]
