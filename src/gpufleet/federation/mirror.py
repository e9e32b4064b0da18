"""The manager's live loop (a `Runtime` participant of the management plane): dispatch and mirror.

Each pass, at `now`:

1. sets every Cluster's Ready, LeaseExpired and Draining (`ClusterConditions`), and warns once of a
   cluster whose join tokens near their expiry (`federation.expiry`);
2. lists each answering worker's copies once (`federation.sync`), deletes those the manager no longer
   holds there (a job deleted in the manager, or moved while the worker was away) and mirrors the
   worker's Events about the rest;
3. for each TrainingJob and InferenceService a cluster holds (annotation `gpufleet.io/cluster`): takes
   it back when that cluster has been silent longer than its lease plus `grace_seconds` (the worker
   has fenced it by then, `federation.worker`), when the worker reports its copy fenced or gone, or
   when the cluster is drained with `MoveAtCheckpoint` and the work may go (`federation.managed`);
   otherwise copies the worker's status onto the manager's object and charges it to its queue's
   fleet-wide quota;
4. dispatches the waiting work, highest priority first and then oldest, with the dispatcher over the
   Clusters' summaries (`manager_view`): the chosen worker gets the work's queue with the quota the
   manager grants it there (`federation.grants`), the job's latest checkpoint, and a copy marked
   managed (suspended until its lease lets it start); the manager's object records the cluster, the
   generation and the flavor it charged (a model, or one with a capacity type); work that fits nowhere
   keeps the dispatcher's reason as its `pendingReason`;
5. brings the queues it made in each answering worker to what it grants there now.

The calls to workers in steps 2 and 5 go through `WorkerReach` (`federation.reach`): a worker whose
call failed or ran late is left alone for a few passes (not read, not written, not dispatched to)
while its lease alone decides whether its work moves, and with a deadline one slow worker does not
hold up the pass for the others.

The manager plane runs no scheduler of its own: its jobs run only in workers. A worker is reached
through `connect(cluster)` (a `WorkerClient`); an unreachable worker leaves its jobs as they are
until its lease says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Literal

from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import ConflictError, GpuFleetError
from gpufleet.api.inference import InferenceService, InferenceServiceStatus
from gpufleet.api.meta import Condition, ObjectMeta, PendingReason, set_condition
from gpufleet.api.queue import Queue
from gpufleet.api.training import TrainingJob, TrainingJobStatus
from gpufleet.controllers.events import record
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.federation.controller import ClusterConditions
from gpufleet.federation.convert import counted_of
from gpufleet.federation.dispatch import ANY_CLUSTER, Dispatched
from gpufleet.federation.expiry import ExpiryWarnings
from gpufleet.federation.grants import Grant, Grants, full_usage, same_grant, worker_queue
from gpufleet.federation.hostlabels import HostRule
from gpufleet.federation.join import connection_version
from gpufleet.federation.link import (
    CLUSTER,
    FENCED,
    GENERATION,
    LOST,
    MANAGED_BY,
    MODEL,
    MOVED,
    EventPage,
    Managed,
    WorkerClient,
)
from gpufleet.federation.managed import (
    ENDED,
    carried_checkpoint,
    mirrored_status,
    moves_for_drain,
    suspended_copy,
    taken_back,
    workload_of,
)
from gpufleet.federation.manager import manager_view
from gpufleet.federation.reach import WorkerReach
from gpufleet.federation.sync import (
    EventMirror,
    Key,
    copies_in,
    key_of,
    queues_in_use,
    stale_copies,
    unused_queue,
)
from gpufleet.federation.take import GangShape
from gpufleet.federation.templates import INVALID_TEMPLATE, template_rules
from gpufleet.federation.unreported import SEQUENCE, next_sequence, sequence_of, take_out_all
from gpufleet.scheduler.flavors import model_of, usage_of
from gpufleet.scheduler.workload import Workload
from gpufleet.store.protocol import Store

log = logging.getLogger(__name__)

_Read = tuple[list[Managed], dict[Key, Managed], EventPage | None]
"""What a pass reads from a worker: its jobs and services, this manager's copies there, its new Events."""

SOURCE = "federation"
"""The source of the manager's own Events (the workers' mirrored ones name their cluster)."""
DISPATCHED = "Dispatched"
"""The manager's condition on a job: True with the cluster that holds it, False while it waits."""


class FederationController:
    """Dispatches the manager's TrainingJobs to workers and mirrors their status back."""

    def __init__(
        self,
        store: Store,
        connect: Callable[[Cluster], WorkerClient],
        *,
        manager: str = "manager",
        grace_seconds: float = 5.0,
        period_seconds: float = 1.0,
        reach: WorkerReach | None = None,
    ) -> None:
        """`reach`: how the pass calls its workers (`federation.reach`); by default one after another,
        backing off a worker whose call failed."""
        if grace_seconds < 0:
            raise ValueError(f"the lease grace must not be negative, got {grace_seconds}")
        self.store = store
        self.connect = connect
        self.manager = manager
        self.grace_seconds = grace_seconds
        self.period_seconds = period_seconds
        self.conditions = ClusterConditions(store)
        self.events = EventMirror(store)
        self.expiry = ExpiryWarnings(store)
        self.reach = reach or WorkerReach()
        self._lease_ends: dict[str, float] = {}
        """Per cluster, when the lease of its newest heartbeat ends: kept when the Cluster is deleted."""
        self._clients: dict[str, WorkerClient] = {}
        self._in_use: dict[str, set[str]] = {}
        """Per worker read this pass, the queues its jobs and services name (`sync.queues_in_use`)."""
        self._sequence = 0
        """The number of the last dispatch (`federation.unreported.next_sequence`)."""

    def step(self, now: float) -> float | None:
        when = to_datetime(now)
        self.conditions.reconcile(now=when)
        clusters = {c.name: c for c in self.store.list(Cluster)}
        self.expiry.check(clusters.values(), now)  # a warning before a join's tokens run out
        for cluster in clusters.values():
            if (ends := _lease_end(cluster)) is not None:
                self._lease_ends[cluster.name] = ends
        queues = {q.name: q for q in self.store.list(Queue)}
        view = manager_view(clusters.values(), queues.values(), now=when)
        grants = Grants()
        managed: list[Managed] = [*self.store.list(TrainingJob), *self.store.list(InferenceService)]
        jobs = {key_of(obj): obj for obj in managed}
        copies = self._read_workers(clusters.values(), jobs, now)
        for name, summary in view.dispatcher.clusters.items():
            if name not in copies:  # out of reach this pass: what is sent there would wait on a timeout
                summary.accepting = False
        waiting: list[tuple[Managed, Workload]] = []
        unreported: list[tuple[str, int | None, str | None, GangShape]] = []
        for job in jobs.values():
            if job.status.phase in ENDED:
                continue
            workload = workload_of(job)
            held = job.metadata.annotations.get(CLUSTER)
            if held is None or not self._still_held(job, held, clusters.get(held), copies.get(held), now):
                waiting.append((job, workload))
                continue
            flavor = job.metadata.annotations.get(MODEL) or None  # a model, or one with a capacity type
            counts = tuple(ps.minimum for ps in workload.pod_sets)
            view.dispatcher.quota.add(workload.queue, usage_of(workload, flavor, counts))
            grants.add(held, workload.queue, full_usage(workload, flavor))
            if job.status.phase not in ENDED:  # as mirrored just now: one that ended holds nothing
                sequence = sequence_of(job.metadata.annotations)
                gang = view.dispatcher.gang_for(workload, flavor, counts, _held_templates(job))
                unreported.append((held, sequence, model_of(flavor), gang))
        # The summaries are the workers' last reports: work sent since, or not placed yet, is not in
        # them and would be dispatched onto again (`federation.unreported`).
        reports = {name: counted_of(cluster.status) for name, cluster in clusters.items()}
        take_out_all(view.dispatcher.clusters, reports, unreported)
        waiting.sort(key=lambda pair: (-pair[1].priority, pair[1].submitted_at, pair[1].name))
        for job, workload in waiting:
            try:
                templates = template_rules(job)
            except GpuFleetError as exc:  # never sent: no worker could make its pods
                self._set_status(
                    job, _waiting_status(job, PendingReason(type=INVALID_TEMPLATE, message=str(exc)), now)
                )
                continue
            choice = view.choices.get(workload.queue, ANY_CLUSTER)
            decision = view.dispatcher.dispatch(workload, choice, templates)
            if isinstance(decision, Dispatched):
                usage = full_usage(workload, decision.flavor or decision.model)
                grant = grants.with_(decision.cluster, workload.queue, usage)
                queue = queues.get(workload.queue)
                if self._send(job, decision, clusters[decision.cluster], queue, grant, now):
                    grants.add(decision.cluster, workload.queue, usage)
                else:
                    view.dispatcher.release(decision)
            else:
                reason = PendingReason(type=decision.reason, message=decision.message)
                self._set_status(job, _waiting_status(job, reason, now))
        resizes: dict[str, Callable[[], None]] = {}
        for name in copies:
            if not self.reach.available(name, now):  # a dispatch there may have failed just now
                continue
            # Its connection may be gone since the read (its token revoked by a leave meanwhile).
            client = self._connected(clusters[name])
            if client is None:
                continue
            resizes[name] = partial(self._resize_grants, name, client, queues, grants)
        self.reach.run(resizes, now)
        return now + self.period_seconds

    # ------------------------------------------------------------------ held work
    def _read_workers(
        self, clusters: Iterable[Cluster], jobs: Mapping[Key, Managed], now: float
    ) -> dict[str, dict[Key, Managed]]:
        """Each answering worker's copies, read once; copies the manager no longer holds there are
        deleted, and the worker's Events about those it holds are mirrored. Workers silent past their
        lease, and those `reach` leaves alone for now, are not called."""
        calls: dict[str, Callable[[], _Read]] = {}
        clients: dict[str, WorkerClient] = {}
        for cluster in clusters:
            if self._lease_lost(cluster, now):
                continue  # silent: not worth a timeout each pass; cleaned up once it reports again
            # First: a worker that joined again is reached anew, whatever its old client met.
            client = self._connected(cluster)
            if client is None:
                continue
            if not self.reach.available(cluster.name, now):
                continue
            clients[cluster.name] = client
            calls[cluster.name] = partial(self._read_worker, cluster.name, client, jobs, now)
        found: dict[str, dict[Key, Managed]] = {}
        for name, (listed, copies, page) in self.reach.run(calls, now).items():
            self._in_use[name] = queues_in_use(listed, copies, self.manager)
            self.events.copy(name, clients[name], copies, page)
            found[name] = copies
        return found

    def _read_worker(
        self, cluster: str, client: WorkerClient, jobs: Mapping[Key, Managed], now: float
    ) -> _Read:
        """The calls of a pass that read one worker (they may run off the pass's thread: they write
        nothing into the manager's store)."""
        listed = client.list_managed()
        copies = copies_in(listed, self.manager)
        for key in stale_copies(cluster, copies, jobs):
            client.delete(*key)
            del copies[key]
        return listed, copies, self.events.fetch(cluster, client, copies, now)

    def _still_held(
        self,
        job: Managed,
        held: str,
        cluster: Cluster | None,
        copies: Mapping[Key, Managed] | None,
        now: float,
    ) -> bool:
        """Mirrors the worker's copy onto `job`; False when the work came back to the manager."""
        ends = self._lease_ends.get(held)
        if cluster is None and ends is not None and now <= ends + self.grace_seconds:
            # Its Cluster was deleted, but the worker may still run it until its lease lapses: the same
            # wait as for a silent cluster. (A manager restarted meanwhile has no such memory.)
            return True
        if cluster is None or self._lease_lost(cluster, now):
            # The worker stopped it when its lease lapsed (or it was never heard from at all).
            lapsed = now if ends is None else min(now, ends)
            reason, why = (
                ("LeaseExpired", "its cluster's lease expired")
                if cluster is not None
                else ("ClusterRemoved", "its Cluster was deleted")
            )
            self._take_back(job, cluster, reason, why, lapsed, now)
            return False
        if copies is None:
            return True  # out of touch, but its lease holds: it is still there
        copy = copies.get(key_of(job))
        if copy is None or FENCED in copy.metadata.annotations:
            self._take_back(job, cluster, "StoppedInCluster", "its cluster stopped it", now, now)
            return False
        status = mirrored_status(job, copy, job.metadata.annotations)
        status.conditions = _dispatched(job, "True", cluster.name, f"runs in cluster {cluster.name}", now)
        self._set_status(job, status)
        if moves_for_drain(job, cluster):
            self._take_back(job, cluster, "Drained", "its cluster is drained for maintenance", now, now)
            return False
        return True

    def _lease_lost(self, cluster: Cluster, now: float) -> bool:
        ends = _lease_end(cluster)
        return ends is None or now > ends + self.grace_seconds

    def _take_back(
        self, job: Managed, cluster: Cluster | None, reason: str, why: str, stopped_at: float, now: float
    ) -> None:
        """Ends the cluster's hold: its copy is deleted where it can be, and the job waits for a cluster
        again with its history (restarts, lost work until `stopped_at`) carried in annotations. A worker
        that `reach` leaves alone is not asked (a lost cluster's hundreds of jobs would each wait on a
        timeout): its copies go once it answers again."""
        if cluster is not None and self.reach.available(cluster.name, now):
            try:
                self._client(cluster).delete(*key_of(job))
            except GpuFleetError as exc:
                # It fenced the copy itself when its lease lapsed, or it stopped it; the copy is removed
                # when it answers again (`sync.stale_copies`: the job is no longer held there).
                self.reach.failed(cluster.name, now, f"cannot remove {job.describe()}: {exc}")
        status, carried = taken_back(job, stopped_at)
        dropped = (CLUSTER, MODEL, MOVED, LOST, SEQUENCE)
        annotations = {k: v for k, v in job.metadata.annotations.items() if k not in dropped} | carried
        self._set_meta(job, annotations)
        where = cluster.name if cluster is not None else job.metadata.annotations.get(CLUSTER, "?")
        record(self.store, job, reason=reason, message=f"taken back from cluster {where}: {why}", now=now,
               type="Warning", source=SOURCE)  # fmt: skip
        status.conditions = _dispatched(job, "False", reason, why, now)
        self._set_status(job, status)

    # ------------------------------------------------------------------ dispatch
    def _send(
        self,
        job: Managed,
        decision: Dispatched,
        cluster: Cluster,
        queue: Queue | None,
        grant: Grant,
        now: float,
    ) -> bool:
        generation = int(job.metadata.annotations.get(GENERATION, "0")) + 1
        self._sequence = next_sequence(self._sequence, now)
        sequence = str(self._sequence)
        # Suspended until the worker has checked its lease (federation.worker starts it).
        copy = suspended_copy(
            job,
            ObjectMeta(
                name=job.name,
                namespace=job.namespace or "default",
                labels=dict(job.metadata.labels),
                annotations={MANAGED_BY: self.manager, GENERATION: str(generation), SEQUENCE: sequence},
            ),
        )
        try:
            client = self._client(cluster)
            if queue is not None:
                self._grant(client, worker_queue(queue, grant, manager=self.manager))
            client.delete(*key_of(copy))  # an older generation's leftover
            checkpoint = carried_checkpoint(job, manager=self.manager)
            if checkpoint is not None:
                client.put_checkpoint(checkpoint)
            client.create(copy)
        except GpuFleetError as exc:
            self.reach.failed(cluster.name, now, f"cannot create {job.describe()}: {exc}")
            return False
        annotations = dict(job.metadata.annotations)
        annotations.update(
            {
                CLUSTER: cluster.name,
                GENERATION: str(generation),
                MODEL: decision.flavor or decision.model or "",
            }
        )
        annotations[SEQUENCE] = sequence
        job = self._set_meta(job, annotations)
        message = f"dispatched to cluster {cluster.name} (generation {generation})"
        record(self.store, job, reason=DISPATCHED, message=message, now=now, source=SOURCE)
        status = job.status.model_copy(deep=True)
        # A service has no Admitted phase: it shows Pending until its replicas run there.
        status.phase = "Admitted" if isinstance(status, TrainingJobStatus) else "Pending"
        status.pending_reason = None
        status.conditions = _dispatched(job, "True", cluster.name, message, now)
        self._set_status(job, status)
        return True

    def _grant(self, client: WorkerClient, wanted: Queue) -> None:
        """Gives the job's queue in the worker the manager's grant, unless it is the worker's own."""
        current = client.read_queue(wanted.name)
        if current is not None and MANAGED_BY not in current.metadata.annotations:
            return  # the worker's own queue: its owner's quota applies
        if current is None or not same_grant(current, wanted):
            client.apply_queue(wanted)

    def _resize_grants(
        self, cluster: str, client: WorkerClient, queues: Mapping[str, Queue], grants: Grants
    ) -> None:
        """Keeps each queue the manager made in an answering worker at what it grants there now: it
        shrinks as work ends or leaves, and follows the manager queue's other settings; once nothing
        there names it any more, it is deleted. (It may run off the pass's thread: it writes only in the
        worker.)"""
        for current in client.list_queues():
            grant = grants.with_(cluster, current.name, {})
            in_use = self._in_use.get(cluster, {current.name})
            if unused_queue(current, self.manager, grant, in_use):
                try:
                    client.delete_queue(current.name)
                except ConflictError as exc:  # work the pass's list did not show names it: kept
                    log.info("cluster %s: queue %s stays: %s", cluster, current.name, exc)
                continue
            queue = queues.get(current.name)
            if current.metadata.annotations.get(MANAGED_BY) != self.manager or queue is None:
                continue
            wanted = worker_queue(queue, grant, manager=self.manager)
            if not same_grant(current, wanted):
                client.apply_queue(wanted)

    def _connected(self, cluster: Cluster) -> WorkerClient | None:
        """`_client`, or None (said in the log) when no client can be made (its token is gone)."""
        try:
            return self._client(cluster)
        except GpuFleetError as exc:
            log.warning("cluster %s: cannot connect to it: %s", cluster.name, exc)
            return None

    def _client(self, cluster: Cluster) -> WorkerClient:
        # A worker that joins again (another URL, a new token) is reached with what it joined with.
        key = f"{cluster.name} {connection_version(self.store, cluster)}"
        if key not in self._clients:
            self._clients[key] = self.connect(cluster)
            # What the old connection met (a token revoked by the new join) says nothing of this one.
            self.reach.succeeded(cluster.name)
        return self._clients[key]

    # ------------------------------------------------------------------ writes
    def _set_meta(self, job: Managed, annotations: dict[str, str]) -> Managed:
        if annotations == job.metadata.annotations:
            return job
        metadata = job.metadata.model_copy(update={"annotations": annotations})
        updated = self.store.update(job.model_copy(update={"metadata": metadata}))
        job.metadata = updated.metadata
        return updated

    def _set_status(self, job: Managed, status: TrainingJobStatus | InferenceServiceStatus) -> None:
        if status == job.status:
            return
        try:
            written = self.store.update_status(job.model_copy(update={"status": status}))
        except ConflictError:
            return  # the next pass works on the fresh object
        job.metadata, job.status = written.metadata, written.status


def _lease_end(cluster: Cluster) -> float | None:
    """When the lease of the cluster's last heartbeat ends: under the lease the worker reported with it
    (a worker of an older release reports none: then the spec's)."""
    ends = cluster.status.lease_end()
    heard = cluster.status.heartbeat_time
    if ends is None and heard is not None:
        ends = heard.timestamp() + cluster.spec.lease_seconds
    return ends


def _dispatched(
    job: Managed, state: Literal["True", "False"], reason: str, message: str, now: float
) -> list[Condition]:
    condition = Condition(type=DISPATCHED, status=state, reason=reason, message=message)
    return set_condition(list(job.status.conditions), condition, now=to_datetime(now))


def _held_templates(job: Managed) -> dict[str, HostRule]:
    """The template rules of work already sent (its template was valid then; one edited since into
    something invalid is taken out of the summary without them)."""
    try:
        return template_rules(job)
    except GpuFleetError:
        return {}


def _waiting_status(
    job: Managed, reason: PendingReason, now: float
) -> TrainingJobStatus | InferenceServiceStatus:
    status = job.status.model_copy(deep=True)
    status.phase, status.pending_reason = "Pending", reason
    status.conditions = _dispatched(job, "False", reason.type, reason.message, now)
    return status
