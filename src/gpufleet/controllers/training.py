"""The TrainingJob controller: a job's Workload, and the job's status read back from it and its pods.

The job owns one Workload named `job-{name}`, the gang of its workers (`minReplicas` makes it
elastic). Everything else is derived, level-triggered, from what the store holds now, by the rules
of `controllers.jobstate` that the Kubernetes operator follows too:

- phase: `Pending` while the workload waits (with the scheduler's reason; a restarted job's
  `Admitted` condition turns False with it), `Admitted` once it holds capacity, `Running` while every
  admitted worker runs or has finished, `Succeeded` when they have all finished their work, `Failed`
  when the workload was evicted more than `restartPolicy.maxRestarts` times;
- `restarts` and `lostGpuSeconds`: the evictions the scheduler recorded in the workload's status
  (GPU failure, node loss, spot interruption, preemption), each with the GPU-seconds since the last
  checkpoint it threw away;
- `lastCheckpoint`: the newest complete Checkpoint of the job, whose time is also handed to the
  workload so that preemption can prefer victims that lose little.

What the store holds is read through `controllers.jobview`, a cache of jobs, workloads, pods and
checkpoints kept from the store's events and caught up with its event log before each reconcile.
A new status is held until the instant has settled (`controllers.heldstatus`): the job's status is
written once per instant, its Events (one per transition, in order) just before it.

Restarts resume from the last checkpoint: the workload is queued again after `backoffSeconds`, and
the twin (or the real job) resumes from the checkpoint's step.
"""

from __future__ import annotations

import contextlib

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.errors import NotFoundError
from gpufleet.api.fields import priority_value
from gpufleet.api.labels import JOB_LABEL, job_workload_name
from gpufleet.api.meta import ObjectMeta, PendingReason
from gpufleet.api.runtime import (
    OwnerRef,
    Pod,
    WorkloadPodSet,
    WorkloadSpec,
)
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob, TrainingJobStatus
from gpufleet.controllers import events, jobstate, lifecycle
from gpufleet.controllers.eventview import ViewedReconciler
from gpufleet.controllers.heldstatus import HeldStatuses
from gpufleet.controllers.jobview import JobView
from gpufleet.controllers.manager import Key
from gpufleet.controllers.ownwrites import OwnWrites
from gpufleet.controllers.timeutil import to_datetime, to_seconds
from gpufleet.controllers.workload_class import workload_class
from gpufleet.observability import tracing
from gpufleet.store.protocol import Store, WatchEvent

SETTLED = ("Running", *jobstate.FINISHED)
"""Phases written at once rather than held: the hand-offs of an instant (workload made, admitted,
pods started) end in them, and a finished job's never changes again. Holding them too would only
add a round to the instant (a checkpoint's, where the status changes once) before the write, and
make whoever waits for a job's end (a user, the simulator's recorder) see it a round later."""


class TrainingJobController(ViewedReconciler[JobView]):
    name = "trainingjob"
    kinds: tuple[str, ...] = ("TrainingJob", "Workload", "Pod", "Checkpoint")
    primary = "TrainingJob"

    def __init__(self, store: Store, *, export_metrics: bool = True) -> None:
        super().__init__(store)
        self.export_metrics = export_metrics
        """Whether each job has its Prometheus series (`jobstate.record_metrics`): the job simulator,
        whose jobs are virtual and whose process serves no metrics, keeps none."""
        self.view = JobView(store)
        """Jobs, workloads, pods and checkpoints, kept from events instead of read each reconcile."""
        self.with_series: set[Key] = set()
        """Jobs whose metric series were set since they were last forgotten."""
        self.held: HeldStatuses[TrainingJob, TrainingJobStatus] = HeldStatuses()
        """Statuses and Events computed at this instant, written when it has settled."""
        self.specs: dict[Key, tuple[tuple[object, ...], WorkloadSpec]] = {}
        """Per job, the Workload spec it asks for and what it was derived from: a job is reconciled
        several times between two changes of its spec, its end or its checkpoint, and building
        (validating) the spec was a sixth of a reconcile."""
        self.workloads_written = OwnWrites()
        """Its own writes of each job's Workload, by (namespace, workload name): the reconcile that
        wrote one computed the job's status from the object it wrote (the spec it changes is not
        read for the status), so that write's event is not looked at again. At a job's submission,
        the echo of its Workload's creation was a fifth of its reconciles."""

    def resync(self, now: float) -> None:
        self.workloads_written.clear()  # every job is looked at again
        super().resync(now)

    def keys_for(self, event: WatchEvent) -> list[Key]:
        obj = event.object
        ns = obj.namespace or ""
        if isinstance(obj, TrainingJob):
            key = (ns, obj.name)
            return [] if event.type == "MODIFIED" and self.held.echo(key, obj) else [key]
        if isinstance(obj, WorkloadObject) and obj.spec.owner.kind == "TrainingJob":
            mine = self.workloads_written.echo((ns, obj.name), obj)  # forgotten either way
            return [] if mine and event.type != "DELETED" else self._job_of((ns, obj.spec.owner.name))
        if isinstance(obj, Pod) and JOB_LABEL in obj.metadata.labels:
            return self._job_of((ns, obj.metadata.labels[JOB_LABEL]))
        if isinstance(obj, Checkpoint):
            return self._job_of((ns, obj.spec.job))
        return []

    def _wrote(self, workload: WorkloadObject) -> WorkloadObject:
        self.workloads_written.wrote((workload.namespace or "", workload.name), workload)
        return workload

    def _job_of(self, key: Key) -> list[Key]:
        """The job an object of it concerns, unless the job is gone and nothing of it is left for its
        reconcile to clean up: a deleted job's Workload and pods go after it, each with an event,
        and looking at the job again for each did nothing. (The view has taken the event already;
        whatever is written of the job later enqueues it again.)"""
        return [key] if key in self.view.jobs or self._leftovers(key) else []

    def _leftovers(self, key: Key) -> bool:
        """Whether a job that is gone still has what `reconcile` cleans up after it."""
        namespace, name = key
        return (
            (namespace, job_workload_name(name)) in self.view.workloads
            or key in self.with_series
            or key in self.specs
        )

    def reconcile(self, key: Key, now: float) -> float | None:
        namespace, name = key
        view = self.view
        self.catch_up(now)
        stored = view.jobs.get(key)
        if stored is None:
            # Gone: what is left of it goes (`_leftovers`); only what is still there is collected.
            if (namespace, job_workload_name(name)) in view.workloads:
                self._collect(namespace, name)
            if key in self.with_series:
                self.with_series.discard(key)
                jobstate.forget_metrics(namespace, name)
            self.specs.pop(key, None)
            # Nothing of it is left to look at: a look again that the catch-up above queued (for
            # its workload's last writes) would find nothing to do.
            self.due.pop(key, None)
            return None
        job = self.held.effective(key, stored)
        checkpoint = self._latest_checkpoint(job)
        workload = self._ensure_workload(job, checkpoint)
        pods = [p for p in view.pods_of(namespace, name) if p.spec.attempt == workload.status.attempts]
        status = self._status(job, workload, pods, checkpoint, now)
        if self.export_metrics:
            interval = job.spec.checkpoint.interval_seconds if job.spec.checkpoint else None
            jobstate.record_metrics(namespace, name, status, checkpoint_interval=interval)
            self.with_series.add(key)
        if status.phase in jobstate.FINISHED and workload.spec.active:
            # The job's end is written first (below, at once); its workload goes inactive at the next
            # look, in this instant (`_ensure_workload` reads the end from the job). Whoever collects
            # finished jobs then deletes both without the workload's change ever being written (the
            # simulator does so for every job).
            self.enqueue(key, now)
        if status != job.status:
            why = _last_disruption(workload)
            self._announce(key, job, status, why, now)
            self.held.hold(key, status)
            if status.phase in SETTLED:
                self._write_held(now, keys=[key])
            if tracing.enabled():  # the job's trace is its Workload's, which the scheduler names too
                lifecycle.job_changed(
                    workload.metadata.uid,
                    job.status,
                    status,
                    job=f"{namespace}/{name}",
                    queue=job.spec.queue,
                    submitted_at=to_seconds(job.metadata.creation_timestamp),
                    why=str(why) if why is not None else None,
                    now=now,
                )
        return None

    def flush(self, now: float) -> None:
        """Writes the held Events and statuses (the manager calls it once the instant has settled)."""
        if self.held:
            self.catch_up(now)
            self._write_held(now)

    def _write_held(self, now: float, keys: list[Key] | None = None) -> None:
        conflicted = self.held.flush(
            self.store, self.view.jobs.get, unchanged=lambda status, job: status == job.status, keys=keys
        )
        for key in conflicted:
            self.enqueue(key, now)

    # ----------------------------------------------------------------- workload
    def _desired_spec(self, job: TrainingJob, checkpoint: Checkpoint | None) -> WorkloadSpec:
        key = (job.namespace or "", job.name)
        # What workload_spec reads: the job's spec (its generation), whether it ended, the checkpoint.
        source = (
            job.metadata.uid,
            job.metadata.generation,
            job.status.phase in jobstate.FINISHED,
            checkpoint.spec.time if checkpoint else None,
        )
        known = self.specs.get(key)
        if known is not None and known[0] == source:
            return known[1]
        spec = workload_spec(job, checkpoint)
        self.specs[key] = (source, spec)
        return spec

    def _ensure_workload(self, job: TrainingJob, checkpoint: Checkpoint | None) -> WorkloadObject:
        namespace = job.namespace or "default"
        desired = self._desired_spec(job, checkpoint)
        workload = self.view.workloads.get((namespace, job_workload_name(job.name)))
        if workload is None:
            return self._wrote(
                self.store.create(
                    WorkloadObject(
                        metadata=ObjectMeta(
                            name=job_workload_name(job.name),
                            namespace=namespace,
                            labels={JOB_LABEL: job.name},
                        ),
                        spec=desired,
                    )
                )
            )
        current = workload.spec
        # Pending, or out of scheduling (suspended): it holds nothing, so it takes the spec's shape.
        if workload.status.phase not in ("Pending", "Inactive"):
            # An admitted gang keeps its shape; only the facts about it move (compared alone: comparing
            # the whole spec on every look at a running job cost more than the rest of this method).
            active = current.active and desired.active
            if (current.last_checkpoint_time, current.active) == (desired.last_checkpoint_time, active):
                return workload
            desired = current.model_copy(
                update={"last_checkpoint_time": desired.last_checkpoint_time, "active": active}
            )
        if desired != current:
            workload = self._wrote(self.store.update(workload.model_copy(update={"spec": desired})))
        return workload

    def _latest_checkpoint(self, job: TrainingJob) -> Checkpoint | None:
        return jobstate.latest_checkpoint(self.view.checkpoints_of(job.namespace or "", job.name), job.name)

    def _collect(self, namespace: str, name: str) -> None:
        """The job is gone: so are its workload and pods (the scheduler frees their capacity)."""
        with contextlib.suppress(NotFoundError):
            self.store.delete(WorkloadObject, job_workload_name(name), namespace)

    # ------------------------------------------------------------------- status
    def _status(
        self,
        job: TrainingJob,
        workload: WorkloadObject,
        pods: list[Pod],
        checkpoint: Checkpoint | None,
        now: float,
    ) -> TrainingJobStatus:
        return jobstate.job_status(
            job.status, _observed(job, workload, pods, checkpoint), now=to_datetime(now)
        )

    def _announce(
        self,
        key: Key,
        job: TrainingJob,
        status: TrainingJobStatus,
        why: jobstate.Disruption | None,
        now: float,
    ) -> None:
        for event in jobstate.job_events(job.status, status, why=why):
            self.held.announce(
                key,
                events.Announcement(
                    job.kind, job.name, job.namespace, event.reason, event.message, now, event.type
                ),
            )


def _observed(
    job: TrainingJob, workload: WorkloadObject, pods: list[Pod], checkpoint: Checkpoint | None
) -> jobstate.Observed:
    """What the store says of the job: the scheduler's workload (admission, evictions, its verdict on
    the restart limit) and the current attempt's pods."""
    wl = workload.status
    expected = sum(wl.admission.counts) if wl.admission else 0
    reason = wl.pending_reason
    return jobstate.Observed(
        generation=job.metadata.generation,
        checkpoint=checkpoint,
        workers=jobstate.Workers.of(
            (p.status.phase for p in pods),
            expected=expected,
            placed=expected,
            admitted=wl.phase == "Admitted",
        ),
        disruptions=len(wl.evictions),
        last_disruption=_last_disruption(workload),
        gave_up=wl.phase == "Failed",
        lost_gpu_seconds=sum(e.lost_gpu_seconds for e in wl.evictions),
        pending=(
            PendingReason(type=reason.type, message=reason.message, details=reason.details)
            if reason
            else jobstate.QUEUED
        ),
        admitted_time=wl.admitted_time,
        nodes=tuple(p.spec.node_name for p in pods if p.spec.node_name),
        suspended=job.spec.suspend,
    )


def _last_disruption(workload: WorkloadObject) -> jobstate.Disruption | None:
    evictions = workload.status.evictions
    return jobstate.Disruption(evictions[-1].reason, evictions[-1].message) if evictions else None


def workload_spec(job: TrainingJob, checkpoint: Checkpoint | None) -> WorkloadSpec:
    """The Workload a job asks for: the gang the scheduler places (also what the federation manager
    dispatches, so both read a job the same way)."""
    spec = job.spec
    owner = OwnerRef(kind="TrainingJob", name=job.name)
    return WorkloadSpec(
        owner=owner,
        workload_class=workload_class([owner.kind]),
        queue=spec.queue,
        priority=priority_value(spec.priority_class),
        user=spec.user or "",
        pod_sets=[
            WorkloadPodSet(
                name="worker",
                count=spec.replicas,
                min_count=spec.min_replicas if spec.elastic else None,
                request=spec.worker,
            )
        ],
        topology=spec.topology,
        preemptible=spec.preemptible,
        active=job.status.phase not in jobstate.FINISHED and not spec.suspend,
        last_checkpoint_time=checkpoint.spec.time if checkpoint else None,
        backoff_seconds=spec.restart_policy.backoff_seconds,
        max_restarts=spec.restart_policy.max_restarts,
    )
