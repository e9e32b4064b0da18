"""The lease rule: a workload never runs in two clusters at once, whatever the network does.

Two halves, each a small state machine over times given as arguments (seconds of fleet time):

- `WorkerLease`, in each worker. The worker sends heartbeats; the manager answers each with an `Ack`
  that lists the assignments it holds for that worker *when it reads the heartbeat*. The worker's lease
  runs from the send time of the newest acknowledged heartbeat for `lease_seconds`. While the lease
  holds, the worker starts what the newest ack lists and it has not run yet; once it lapses (the
  manager is unreachable for longer than a lease) it starts nothing and stops the managed work it runs
  (fencing): the manager may be moving it. An assignment the worker stopped or finished is never started
  again; a re-dispatch is a new assignment (a higher generation).
- `ManagerLedger`, in the manager. It records which cluster holds which assignment and when it last
  heard from each cluster. It re-dispatches a workload only when its cluster reported that assignment
  stopped, or when the cluster has been silent for longer than `lease_seconds + grace_seconds`.

Why that is safe: an ack sent for a heartbeat sent at `s` is read by the manager no earlier than `s`,
so any lease it grants ends by `last_heard + lease`. The manager moves work only after
`last_heard + lease + grace`, by when the worker has seen its lease lapse, provided it checks its lease
at least every `grace` seconds (and clocks differ by less than that). The property is checked by a
hypothesis test over random partitions, delays, drops and heartbeats (tests/federation/test_lease.py).

Pure: no I/O, no clock. The Cluster controller and the worker's agent carry the messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Assignment = tuple[str, int]
"""A workload and the generation of its dispatch (1 for the first, +1 for each re-dispatch)."""

Outcome = Literal["Finished", "Stopped"]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A worker's report: what it runs, and the assignments that ended there (finished or stopped)."""

    cluster: str
    sent_at: float
    running: frozenset[Assignment]
    ended: Mapping[Assignment, Outcome] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ack:
    """The manager's answer to a heartbeat: the worker's assignments as the manager held them then."""

    cluster: str
    heartbeat_sent_at: float
    assignments: frozenset[Assignment]


class WorkerLease:
    """The worker's half: which managed work it may start and must stop."""

    def __init__(self, cluster: str, *, lease_seconds: float) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"cluster {cluster}: leaseSeconds must be positive, got {lease_seconds}")
        self.cluster = cluster
        self.lease_seconds = lease_seconds
        self.ack: Ack | None = None
        self.running: set[Assignment] = set()
        self.ended: dict[Assignment, Outcome] = {}

    def lease_valid(self, now: float) -> bool:
        return self.ack is not None and now <= self.ack.heartbeat_sent_at + self.lease_seconds

    def heartbeat(self, now: float) -> Heartbeat:
        return Heartbeat(self.cluster, now, frozenset(self.running), dict(self.ended))

    def acknowledged(self, ack: Ack) -> None:
        """Keeps the newest ack (by the heartbeat it answers): acks may arrive out of order."""
        if self.ack is None or ack.heartbeat_sent_at > self.ack.heartbeat_sent_at:
            self.ack = ack

    def tick(self, now: float) -> tuple[list[Assignment], list[Assignment]]:
        """Brings what runs in line with the lease and the newest ack: (started, stopped)."""
        stopped: list[Assignment]
        if not self.lease_valid(now):
            stopped = sorted(self.running)
        else:
            assert self.ack is not None
            stopped = sorted(self.running - self.ack.assignments)
        for assignment in stopped:
            self.running.discard(assignment)
            self.ended[assignment] = "Stopped"
        started: list[Assignment] = []
        if self.lease_valid(now):
            assert self.ack is not None
            for assignment in sorted(self.ack.assignments):
                if assignment not in self.running and assignment not in self.ended:
                    self.running.add(assignment)
                    started.append(assignment)
        return started, stopped

    def finish(self, assignment: Assignment) -> None:
        """The workload completed here."""
        if assignment in self.running:
            self.running.discard(assignment)
            self.ended[assignment] = "Finished"


class ManagerLedger:
    """The manager's half: who holds what, and what may be dispatched again."""

    def __init__(self, clusters: Mapping[str, float], *, grace_seconds: float, now: float = 0.0) -> None:
        """`clusters` maps each cluster to its lease in seconds; a cluster not heard from yet is counted
        from `now` (it joined then)."""
        if grace_seconds < 0:
            raise ValueError(f"the lease grace must not be negative, got {grace_seconds}")
        self.lease = dict(clusters)
        self.grace_seconds = grace_seconds
        self.last_heard: dict[str, float] = dict.fromkeys(clusters, now)
        self.holder: dict[str, tuple[str, int]] = {}
        self.generation: dict[str, int] = {}
        self.pending: set[str] = set()
        self.finished: set[str] = set()

    def submit(self, workloads: Iterable[str]) -> None:
        for name in workloads:
            if name not in self.holder and name not in self.finished:
                self.pending.add(name)

    def expired(self, cluster: str, now: float) -> bool:
        return now > self.last_heard[cluster] + self.lease[cluster] + self.grace_seconds

    def assign(self, workload: str, cluster: str, now: float) -> Assignment:
        """Dispatches a pending workload to a cluster whose lease holds."""
        if workload not in self.pending:
            raise ValueError(f"workload {workload} is not waiting for a cluster")
        if self.expired(cluster, now):
            raise ValueError(f"cluster {cluster}: its lease expired, it takes no work")
        generation = self.generation.get(workload, 0) + 1
        self.generation[workload] = generation
        self.holder[workload] = (cluster, generation)
        self.pending.discard(workload)
        return workload, generation

    def on_heartbeat(self, heartbeat: Heartbeat, now: float) -> Ack:
        """Records what the worker reports and answers with its assignments as held now."""
        cluster = heartbeat.cluster
        self.last_heard[cluster] = max(self.last_heard[cluster], now)
        for (workload, generation), outcome in heartbeat.ended.items():
            if self.holder.get(workload) != (cluster, generation):
                continue  # an older assignment, already moved
            del self.holder[workload]
            if outcome == "Finished":
                self.finished.add(workload)
            else:
                self.pending.add(workload)
        held = frozenset((w, g) for w, (c, g) in self.holder.items() if c == cluster)
        return Ack(cluster, heartbeat.sent_at, held)

    def reclaim(self, now: float) -> list[str]:
        """Takes back the work of clusters silent for longer than lease and grace: pending again, to be
        dispatched elsewhere (restarting from their last checkpoint)."""
        moved = sorted(w for w, (c, _) in self.holder.items() if self.expired(c, now))
        for workload in moved:
            del self.holder[workload]
            self.pending.add(workload)
        return moved
