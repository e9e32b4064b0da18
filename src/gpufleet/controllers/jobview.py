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
from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.runtime import Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob
from gpufleet.controllers.eventview import EventFedView
from gpufleet.store.protocol import Store

Key = tuple[str, str]
"""(namespace, name)."""
Member = TypeVar("Member", Pod, Checkpoint)


class JobView(EventFedView):
    """TrainingJobs, Workloads, and per job its pods and checkpoints, from one list and then events."""

    KINDS = ("TrainingJob", "Workload", "Pod", "Checkpoint")

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.jobs: dict[Key, TrainingJob] = {}
        self.workloads: dict[Key, WorkloadObject] = {}
        self._pods: dict[Key, dict[str, Pod]] = {}
        """Per job (namespace, job label), its pods by name."""
        self._pod_job: dict[Key, Key] = {}
        """Per pod, the job it is indexed under (a pod's label may change)."""
        self._checkpoints: dict[Key, dict[str, Checkpoint]] = {}
        self._checkpoint_job: dict[Key, Key] = {}

    # ------------------------------------------------------------------ feeding
    def _load(self) -> None:
        self.jobs = {(j.namespace or "", j.name): j for j in self.store.list(TrainingJob)}
        self.workloads = {(w.namespace or "", w.name): w for w in self.store.list(WorkloadObject)}
        self._pods, self._pod_job = {}, {}
        for pod in self.store.list(Pod):
            self._put_pod(pod)
        self._checkpoints, self._checkpoint_job = {}, {}
        for checkpoint in self.store.list(Checkpoint):
            self._put_checkpoint(checkpoint)

    def _take(self, obj: object, *, deleted: bool) -> None:
        if not isinstance(obj, TrainingJob | WorkloadObject | Pod | Checkpoint):
            return
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
