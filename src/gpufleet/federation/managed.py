"""The kinds a manager dispatches to workers, and what differs between them.

TrainingJobs and InferenceServices both go to one worker cluster at a time, start there suspended
until the worker's lease lets them run (both have `spec.suspend`), and mirror their status back. They
differ in the gang the dispatcher places and in what moving them costs:

- a TrainingJob is its gang (`controllers.training.workload_spec`, as the worker's scheduler reads it);
  a move after it started is a restart from its last checkpoint, counted in the manager;
- an InferenceService is dispatched as one unit of `replicas.max` replicas of which `replicas.min` must
  fit now (the dispatcher checks an elastic gang's `minCount`), with no topology: the worker spreads
  and autoscales them inside the quota the manager grants (all `max` replicas). A move is a fresh
  start, not a restart: a service keeps no state to lose.

A job's restarts and lost GPU-seconds are counted over all the clusters it ran in: what earlier
workers counted, and each move, is kept in annotations and added to what its present worker counts.

A job that moves takes its latest checkpoint along (`carried_checkpoint`), so it resumes from it in
the next worker; a cluster drained with `MoveAtCheckpoint` lets its work go at the moment that loses
least (`moves_for_drain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.cluster import DRAINING, Cluster
from gpufleet.api.fields import priority_value
from gpufleet.api.inference import InferenceService, InferenceServiceStatus
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import OwnerRef, WorkloadPodSet, WorkloadSpec
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob, TrainingJobStatus
from gpufleet.controllers.convert import core_workload
from gpufleet.controllers.training import workload_spec
from gpufleet.controllers.workload_class import workload_class
from gpufleet.federation.link import LOST, MANAGED_BY, MOVED, Managed
from gpufleet.scheduler.flavors import pod_gpu_milli
from gpufleet.scheduler.lostwork import lost_gpu_seconds
from gpufleet.scheduler.workload import Workload

ENDED: Final = ("Succeeded", "Failed")


def workload_of(obj: Managed) -> Workload:
    """The gang the dispatcher places, read as the worker's scheduler will read it."""
    namespace = obj.namespace or "default"
    meta = ObjectMeta(name=obj.name, namespace=namespace, creation_timestamp=obj.metadata.creation_timestamp)
    spec = workload_spec(obj, None) if isinstance(obj, TrainingJob) else _service_spec(obj)
    return core_workload(WorkloadObject(metadata=meta, spec=spec))


def _service_spec(service: InferenceService) -> WorkloadSpec:
    spec = service.spec
    owner = OwnerRef(kind="InferenceService", name=service.name)
    return WorkloadSpec(
        owner=owner,
        workload_class=workload_class([owner.kind]),
        queue=spec.queue,
        priority=priority_value(spec.priority_class),
        pod_sets=[
            WorkloadPodSet(
                name="server",
                count=max(spec.replicas.max, 1),
                min_count=max(spec.replicas.min, 1),
                request=spec.replica,
            )
        ],
        preemptible=spec.preemptible,
    )


def suspended_copy(obj: Managed, metadata: ObjectMeta) -> Managed:
    """The worker's copy: the same spec, suspended until the worker's lease lets it start."""
    if isinstance(obj, TrainingJob):
        return TrainingJob(metadata=metadata, spec=obj.spec.model_copy(update={"suspend": True}))
    return InferenceService(metadata=metadata, spec=obj.spec.model_copy(update={"suspend": True}))


def mirrored_status(
    obj: Managed, copy: Managed, before: Mapping[str, str]
) -> TrainingJobStatus | InferenceServiceStatus:
    """The manager's status from the worker's copy; a job's restarts and lost GPU-seconds include those
    counted before this worker (`before`: the annotations `taken_back` wrote)."""
    status = copy.status.model_copy(deep=True)
    if isinstance(status, TrainingJobStatus):
        status.restarts += int(before.get(MOVED, "0"))
        status.lost_gpu_seconds = round(status.lost_gpu_seconds + float(before.get(LOST, "0")), 3)
    return status


def taken_back(
    obj: Managed, stopped_at: float
) -> tuple[TrainingJobStatus | InferenceServiceStatus, dict[str, str]]:
    """The status of work back in the manager, waiting for a cluster, and the annotations that carry a
    job's history to its next worker (which counts from zero).

    A job that had started there restarts elsewhere from its last checkpoint: one restart, and the
    GPU-seconds it ran since that checkpoint until it stopped at `stopped_at` are lost
    (`scheduler.lostwork`, as for an eviction). A service keeps no state: nothing is lost.
    """
    status = obj.status.model_copy(deep=True)
    status.phase = "Pending"
    status.ready_replicas = 0
    if isinstance(status, InferenceServiceStatus) or isinstance(obj, InferenceService):
        return status, {}
    if status.start_time is not None:
        status.restarts += 1
        checkpoint = status.last_checkpoint.time if status.last_checkpoint is not None else None
        milli = sum(pod_gpu_milli(ps.request) for ps in workload_of(obj).pod_sets) * max(status.replicas, 1)
        lost = lost_gpu_seconds(
            milli,
            status.start_time.timestamp(),
            checkpoint.timestamp() if checkpoint is not None else None,
            stopped_at,
        )
        status.lost_gpu_seconds = round(status.lost_gpu_seconds + lost, 3)
    status.replicas, status.nodes, status.start_time = 0, [], None
    carried = {MOVED: str(status.restarts), LOST: f"{status.lost_gpu_seconds:g}"}
    return status, {k: v for k, v in carried.items() if v != "0"}


def carried_checkpoint(obj: Managed, *, manager: str) -> Checkpoint | None:
    """The job's latest checkpoint as a Checkpoint object for the worker it goes to, so it resumes
    there from that step (a checkpoint's URI is storage every cluster reaches); None when it has none.
    Marked as the manager's, as its copies are: the manager's token in a worker writes only such."""
    if not isinstance(obj, TrainingJob):
        return None
    ref = obj.status.last_checkpoint
    if ref is None or ref.name is None or ref.step is None or ref.uri is None:
        return None
    return Checkpoint(
        metadata=ObjectMeta(
            name=ref.name, namespace=obj.namespace or "default", annotations={MANAGED_BY: manager}
        ),
        spec=CheckpointSpec(job=obj.name, step=ref.step, uri=ref.uri, time=ref.time),
    )


def moves_for_drain(obj: Managed, cluster: Cluster) -> bool:
    """Whether work held by a cluster drained with `running: MoveAtCheckpoint` leaves it now: a service
    at once (it keeps no state), a job that has not started there at once, a running job once it has
    checkpointed since the drain began (the Draining condition's transition), so it loses nothing."""
    drain = cluster.spec.drain
    if drain is None or drain.running != "MoveAtCheckpoint":
        return False
    if isinstance(obj, InferenceService) or obj.status.start_time is None:
        return True
    since = next((c.last_transition_time for c in cluster.status.conditions if c.type == DRAINING), None)
    taken = obj.status.last_checkpoint.time if obj.status.last_checkpoint is not None else None
    return since is not None and taken is not None and taken >= since
