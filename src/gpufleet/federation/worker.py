"""The worker side of federation, run in a worker's control loop (a `Runtime` participant).

Each step it (a) reports the worker's summary and a heartbeat into its Cluster in the manager
(`ManagerLink`) every `heartbeat_seconds`, and (b) enforces the lease rule (`federation.lease`) on the
managed TrainingJobs and InferenceServices the manager created here:

- the manager creates them suspended, so nothing starts before the worker has checked its lease;
- while the lease holds (the newest heartbeat the manager accepted was sent less than
  `Cluster.spec.leaseSeconds` ago) the worker un-suspends them: its own scheduler admits them in its
  queue;
- once the lease lapses it suspends every managed job it has not finished and marks it fenced: work it
  has not started is no longer admitted, and work it runs stops, because the manager may be moving it.
  A fenced job never starts here again; the manager's re-dispatch is a new generation.

An accepted status write is the manager's acknowledgement: the worker's copies are the assignments it
holds (the manager creates and deletes them), so the ack needs no second message. Time is an argument.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.api.cluster import Cluster, DispatchCount
from gpufleet.api.errors import ConflictError, GpuFleetError
from gpufleet.api.inference import InferenceService
from gpufleet.api.training import TrainingJob
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.federation.link import FENCED, MANAGED_BY, Managed, ManagerLink
from gpufleet.federation.manager import worker_status
from gpufleet.federation.unreported import sequence_of
from gpufleet.fleet.state import FleetState
from gpufleet.store.protocol import Store

log = logging.getLogger(__name__)

ATTEMPTS = 5
"""Status writes tried per heartbeat before a conflict waits for the next one."""
CHANGE_REPORT_SECONDS = 1.0
"""Least time from one heartbeat to the next sent early because the free GPUs changed (work ended or
started). The manager dispatches on the newest report: one up to a heartbeat period old leaves GPUs
idle after work ends, which on a twin run of minute-long jobs cost several points of utilisation
against one cluster of the same size (`gpufleet bench federation --utilisation`). The limit is between
instants: a change later in the instant of the last report (the scheduler placing the work the manager
just sent, a job's end reaching the fleet a round after the report) is reported in that instant too, or
the manager would dispatch for a whole second on free GPUs that are gone, or miss ones just freed."""
ENDED = ("Succeeded", "Failed")
BEATS_PER_LEASE = 4


@dataclass(slots=True)
class LeaseState:
    """What the worker knows of its lease: the send time of the newest accepted heartbeat."""

    acknowledged_at: float | None = None
    lease_seconds: float = 0.0

    def ends(self) -> float | None:
        return None if self.acknowledged_at is None else self.acknowledged_at + self.lease_seconds

    def valid(self, now: float) -> bool:
        return self.acknowledged_at is not None and now <= self.acknowledged_at + self.lease_seconds


class WorkerAgent:
    """Reports into the manager and keeps the worker's managed work inside its lease."""

    def __init__(
        self,
        store: Store,
        cluster: str,
        manager: ManagerLink,
        fleet: Callable[[], FleetState | None],
        *,
        heartbeat_seconds: float = 5.0,
    ) -> None:
        if heartbeat_seconds <= 0:
            raise ValueError(
                f"cluster {cluster}: heartbeat_seconds must be positive, got {heartbeat_seconds}"
            )
        self.store = store
        self.cluster = cluster
        self.manager = manager
        self.fleet = fleet
        self.heartbeat_seconds = heartbeat_seconds
        self.lease = LeaseState()
        self.next_beat = 0.0
        self.last_beat = -math.inf
        self.reported: tuple[object, ...] | None = None
        """What the last report depended on (`_report_key`)."""

    def period(self) -> float:
        """Seconds between heartbeats: `heartbeat_seconds`, or a quarter of the lease when that is
        shorter (a kubelet renews its node Lease as often), so a short lease does not lapse between
        two heartbeats that both arrive."""
        if self.lease.lease_seconds > 0:
            return min(self.heartbeat_seconds, self.lease.lease_seconds / BEATS_PER_LEASE)
        return self.heartbeat_seconds

    def step(self, now: float) -> float | None:
        managed = self._managed()
        changed = self._report_key(managed) != self.reported
        early = self.last_beat + CHANGE_REPORT_SECONDS
        if now >= self.next_beat or (changed and (now >= early or now == self.last_beat)):
            self.next_beat = now + self.period()
            self.last_beat = now
            self._beat(now, managed)
            self.next_beat = min(self.next_beat, now + self.period())  # the lease the ack gave
        self._enforce(now, managed)
        wake = self.next_beat
        if self._report_key(managed) != self.reported:
            wake = min(wake, max(early, self.last_beat + CHANGE_REPORT_SECONDS))
        ends = self.lease.ends()
        if ends is not None and ends >= now:
            # Wake just after the lease lapses, so managed work is fenced then and not at the next
            # heartbeat (what the manager's grace would otherwise have to cover).
            return min(wake, math.nextafter(ends, math.inf))
        return wake

    def _report_key(self, managed: list[Managed]) -> tuple[object, ...] | None:
        """What the report depends on, cheap to compare: the fleet's node generation, its free whole
        GPUs and free milli-GPU, and how many numbered dispatches it counts (with their sum, so one
        counted and another deleted in the same step still differ); None before the scheduler has a
        view. A dispatch whose status shows it placed a round after its GPUs left the free count must be
        reported as counted, or the manager would take it out of the summary twice."""
        fleet = self.fleet()
        if fleet is None:
            return None
        n = fleet.n_rows
        counted = [seq for seq, copy in _numbered(managed) if _counts(copy)]
        free = (fleet.generation, int(fleet.whole_free[:n].sum()), int(fleet.free_milli[:n].sum()))
        return (*free, len(counted), sum(counted))

    def leave(self, now: float) -> None:
        """The plane no longer reports to this manager: its managed work is fenced at once, as when
        the lease lapses, so the manager takes it back rather than waiting out the lease."""
        self.lease = LeaseState(acknowledged_at=-math.inf)
        self._enforce(now, self._managed())

    def _managed(self) -> list[Managed]:
        found: list[Managed] = [*self.store.list(TrainingJob), *self.store.list(InferenceService)]
        return [obj for obj in found if MANAGED_BY in obj.metadata.annotations]

    def _beat(self, now: float, managed: list[Managed]) -> None:
        # The copies are read before the fleet: a copy whose status says placed was placed before this
        # read, so its GPUs are out of the free count taken after it (the other order could name as
        # counted work the figures do not yet count).
        dispatches = dispatch_count(managed)
        fleet = self.fleet()
        if fleet is None:
            return  # the scheduler has not built its view yet: nothing true to report
        self.reported = self._report_key(managed)
        running = sum(1 for job in managed if job.status.phase in ("Admitted", "Running"))
        status = worker_status(fleet, now=to_datetime(now), running_workloads=running)
        status.dispatches = dispatches
        try:
            for attempt in range(ATTEMPTS):
                current: Cluster = self.manager.read_cluster(self.cluster)
                # The manager owns the conditions; the worker replaces only what it reports.
                # The lease is the spec's as read now, reported with the heartbeat: the manager counts
                # this heartbeat's lease exactly as the worker does, even if the spec changes later.
                lease = current.spec.lease_seconds
                current.status = status.model_copy(
                    update={"conditions": current.status.conditions, "lease_seconds": lease}
                )
                try:
                    self.manager.write_cluster_status(current)
                except ConflictError:
                    if attempt == ATTEMPTS - 1:
                        raise
                    continue
                self.lease.acknowledged_at = now
                self.lease.lease_seconds = lease
                return
        except GpuFleetError as exc:
            # Out of touch: the lease runs out on its own; the next heartbeat tries again.
            log.warning("cluster %s: heartbeat to the manager failed: %s", self.cluster, exc)

    def _enforce(self, now: float, managed: list[Managed]) -> None:
        valid = self.lease.valid(now)
        for job in managed:
            annotations = job.metadata.annotations
            if job.status.phase in ENDED or FENCED in annotations:
                continue
            if valid and job.spec.suspend:
                self._write(job, suspend=False, fenced=False)
            elif not valid and (not job.spec.suspend or self.lease.acknowledged_at is not None):
                # Never started (suspended since creation) or running: either way it must not go on
                # here once the manager may have moved it. Before the first accepted heartbeat there
                # was no lease to lapse, and a job still suspended simply waits for one.
                self._write(job, suspend=True, fenced=True)

    def _write(self, job: Managed, *, suspend: bool, fenced: bool) -> None:
        annotations = dict(job.metadata.annotations)
        if fenced:
            annotations[FENCED] = "LeaseExpired"
        metadata = job.metadata.model_copy(update={"annotations": annotations})
        spec = job.spec.model_copy(update={"suspend": suspend})
        # A controller that wrote meanwhile wins; the next step sees the fresh object.
        with contextlib.suppress(ConflictError):
            self.store.update(job.model_copy(update={"metadata": metadata, "spec": spec}))


def _numbered(managed: list[Managed]) -> list[tuple[int, Managed]]:
    """The managed copies whose dispatch has a number, with it."""
    found = ((sequence_of(copy.metadata.annotations), copy) for copy in managed)
    return [(seq, copy) for seq, copy in found if seq is not None]


def _counts(copy: Managed) -> bool:
    """Whether the worker's figures count a managed copy: placed (its GPUs are taken: a job with workers
    placed, its gang whole; a service with a replica placed), or finished or fenced (it holds none and
    takes none)."""
    if copy.status.phase in ENDED or FENCED in copy.metadata.annotations:
        return True
    if isinstance(copy, TrainingJob):
        return copy.status.replicas > 0
    return copy.status.placed_gpus > 0 or copy.status.ready_replicas > 0


def dispatch_count(managed: list[Managed]) -> DispatchCount:
    """Which of the manager's dispatches a report of the worker's present figures counts: the newest it
    holds, and those it holds but has not placed (`federation.unreported`)."""
    numbered = _numbered(managed)
    return DispatchCount(
        newest=max((seq for seq, _ in numbered), default=0),
        uncounted=sorted(seq for seq, copy in numbered if not _counts(copy)),
    )
