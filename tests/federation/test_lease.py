"""The lease rule: no workload runs in two clusters at once across random partitions, message delays,
drops and heartbeats; a lost cluster's work moves once its lease (and the grace) has passed; and the
grace is what makes it safe (without it the same schedule runs a workload twice)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.federation.lease import Ack, Heartbeat, ManagerLedger, WorkerLease

LEASE = 10.0
TICK_GAP = 2  # a worker checks its lease at least this often (fleet-time units)


@dataclass
class Fleet:
    """A manager, workers and the network between them, stepped one time unit at a time."""

    clusters: Sequence[str]
    grace: float
    tick_gap: int = TICK_GAP
    now: int = 0
    workers: dict[str, WorkerLease] = field(default_factory=dict)
    last_tick: dict[str, int] = field(default_factory=dict)
    to_manager: list[tuple[int, Heartbeat]] = field(default_factory=list)
    to_worker: list[tuple[int, Ack]] = field(default_factory=list)
    ledger: ManagerLedger = field(init=False)
    twice: list[tuple[int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ledger = ManagerLedger(dict.fromkeys(self.clusters, LEASE), grace_seconds=self.grace)
        for name in self.clusters:
            self.workers[name] = WorkerLease(name, lease_seconds=LEASE)
            self.last_tick[name] = 0

    def heartbeat(self, cluster: str, delay: int | None) -> None:
        """The worker reports; None: the message is lost (a partition)."""
        if delay is not None:
            self.to_manager.append((self.now + delay, self.workers[cluster].heartbeat(self.now)))

    def advance(self, units: int, ack_delay: int | None) -> None:
        for _ in range(units):
            self.now += 1
            self._deliver(ack_delay)
            for name in self.workers:
                if self.now - self.last_tick[name] >= self.tick_gap:
                    self.tick(name)
            self.ledger.reclaim(self.now)
            self.check()

    def _deliver(self, ack_delay: int | None) -> None:
        due = [m for m in self.to_manager if m[0] <= self.now]
        self.to_manager = [m for m in self.to_manager if m[0] > self.now]
        for _, beat in due:
            ack = self.ledger.on_heartbeat(beat, self.now)
            if ack_delay is not None:
                self.to_worker.append((self.now + ack_delay, ack))
        acks = [m for m in self.to_worker if m[0] <= self.now]
        self.to_worker = [m for m in self.to_worker if m[0] > self.now]
        for _, ack in acks:
            self.workers[ack.cluster].acknowledged(ack)

    def tick(self, cluster: str) -> None:
        self.workers[cluster].tick(self.now)
        self.last_tick[cluster] = self.now
        self.check()

    def dispatch(self, workload: str, cluster: str) -> None:
        if workload in self.ledger.pending and not self.ledger.expired(cluster, self.now):
            self.ledger.assign(workload, cluster, self.now)

    def finish(self, cluster: str, workload: str) -> None:
        for assignment in sorted(self.workers[cluster].running):
            if assignment[0] == workload:
                self.workers[cluster].finish(assignment)

    def running_in(self, workload: str) -> list[str]:
        return [n for n, w in self.workers.items() if any(a[0] == workload for a in w.running)]

    def check(self) -> None:
        for workload in {a[0] for w in self.workers.values() for a in w.running}:
            if len(self.running_in(workload)) > 1:
                self.twice.append((self.now, workload))


CLUSTERS = ("a", "b", "c")
WORKLOADS = ("w0", "w1", "w2", "w3")
actions = st.tuples(
    st.sampled_from(("cut", "heal", "finish", "tick", "wait")),
    st.sampled_from(CLUSTERS),
    st.sampled_from(WORKLOADS),
    st.integers(0, 4),  # how late this step's messages arrive
    st.integers(0, 6),  # time units that pass after the step
)


def run_schedule(fleet: Fleet, steps: list[tuple[str, str, str, int, int]]) -> None:
    """Every time unit the manager dispatches what waits (to the clusters in turn) and every worker not
    cut off sends a heartbeat; the schedule cuts and heals clusters, delays messages, finishes work and
    ticks workers early. Stops at the first moment a workload runs twice."""
    cut: set[str] = set()
    fleet.ledger.submit(WORKLOADS)
    for kind, cluster, workload, delay, wait in steps:
        if kind == "cut":
            cut.add(cluster)
        elif kind == "heal":
            cut.discard(cluster)
        elif kind == "finish":
            fleet.finish(cluster, workload)
        elif kind == "tick":
            fleet.tick(cluster)
        for _ in range(wait):
            for i, name in enumerate(sorted(fleet.ledger.pending)):
                fleet.dispatch(name, CLUSTERS[(fleet.now + i) % len(CLUSTERS)])
            for name in CLUSTERS:
                fleet.heartbeat(name, None if name in cut else delay)
            fleet.advance(1, delay if cluster not in cut else None)
            if fleet.twice:
                return


@settings(max_examples=300, deadline=None)
@given(st.lists(actions, max_size=60))
def test_a_workload_never_runs_in_two_clusters_at_once(steps: list[tuple[str, str, str, int, int]]) -> None:
    fleet = Fleet(CLUSTERS, grace=TICK_GAP)
    run_schedule(fleet, steps)
    assert fleet.twice == [], f"ran twice at {fleet.twice[0]}"
    for workload in fleet.ledger.finished:
        assert workload not in fleet.ledger.pending and workload not in fleet.ledger.holder


def random_schedules(count: int) -> list[list[tuple[str, str, str, int, int]]]:
    rng = random.Random(15)
    kinds = ("cut", "heal", "finish", "tick", "wait")
    return [
        [
            (
                rng.choice(kinds),
                rng.choice(CLUSTERS),
                rng.choice(WORKLOADS),
                rng.randint(0, 3),
                rng.randint(0, 6),
            )
            for _ in range(40)
        ]
        for _ in range(count)
    ]


def test_the_schedules_find_a_double_run_when_the_grace_is_shorter_than_the_lease_checks() -> None:
    """The same kind of schedules as the property above, seeded: with the grace covering the workers'
    lease check interval none runs a workload twice; with workers checking 4x less often than the
    grace covers, some do, so the property above is one a wrong rule would fail."""
    schedules = random_schedules(300)

    def double_runs(grace: float, tick_gap: int) -> int:
        found = 0
        for steps in schedules:
            fleet = Fleet(CLUSTERS, grace=grace, tick_gap=tick_gap)
            run_schedule(fleet, steps)
            found += bool(fleet.twice)
        return found

    assert double_runs(grace=2, tick_gap=2) == 0
    assert double_runs(grace=2, tick_gap=8) > 0


def lost_cluster(grace: float, tick_gap: int = TICK_GAP) -> Fleet:
    """Cluster a runs w0 and then goes silent; the manager moves w0 to b as soon as it may."""
    fleet = Fleet(("a", "b"), grace=grace, tick_gap=tick_gap)
    fleet.ledger.submit(["w0"])
    fleet.dispatch("w0", "a")
    fleet.heartbeat("a", 0)
    fleet.advance(1, 0)
    fleet.tick("a")
    assert fleet.running_in("w0") == ["a"]
    a_ticks = fleet.last_tick["a"]
    while "w0" not in fleet.ledger.pending:
        fleet.heartbeat("b", 0)
        fleet.advance(1, 0)
    assert fleet.now <= a_ticks + LEASE + grace + 1, "moved as soon as lease and grace passed"
    fleet.dispatch("w0", "b")
    fleet.heartbeat("b", 0)
    fleet.advance(1, 0)
    fleet.tick("b")
    return fleet


def test_a_lost_clusters_work_moves_after_lease_and_grace_and_runs_once() -> None:
    fleet = lost_cluster(grace=TICK_GAP)
    assert fleet.running_in("w0") == ["b"] and fleet.twice == []
    assert fleet.workers["a"].ended == {("w0", 1): "Stopped"}, "a fenced its work when its lease lapsed"
    assert fleet.ledger.holder["w0"] == ("b", 2), "the re-dispatch is a new generation"


def test_without_the_grace_a_slow_worker_would_run_it_twice() -> None:
    """The grace covers the worker's lease check interval: with none, the manager moves the work
    while the silent worker has not yet noticed its lease lapsed."""
    fleet = lost_cluster(grace=0, tick_gap=8)
    assert fleet.twice, "the schedule is the one the grace exists for"


def test_a_stale_ack_never_restarts_what_the_worker_stopped() -> None:
    worker = WorkerLease("a", lease_seconds=LEASE)
    worker.acknowledged(Ack("a", 0.0, frozenset({("w0", 1)})))
    worker.tick(1.0)
    worker.acknowledged(Ack("a", 2.0, frozenset()))  # the manager no longer lists it: stop
    assert worker.tick(3.0) == ([], [("w0", 1)])
    worker.acknowledged(Ack("a", 1.0, frozenset({("w0", 1)})))  # older, arriving late: ignored
    assert worker.tick(4.0) == ([], []) and worker.running == set()


def test_the_manager_moves_only_what_stopped_and_keeps_what_finished() -> None:
    ledger = ManagerLedger({"a": LEASE, "b": LEASE}, grace_seconds=2)
    ledger.submit(["w0", "w1"])
    ledger.assign("w0", "a", 0)
    ledger.assign("w1", "a", 0)
    ack = ledger.on_heartbeat(
        Heartbeat("a", 5, frozenset(), {("w0", 1): "Finished", ("w1", 1): "Stopped"}), 5
    )
    assert ack.assignments == frozenset()
    assert ledger.finished == {"w0"} and ledger.pending == {"w1"}
    assert ledger.reclaim(5 + LEASE + 2) == [], "nothing is held there any more"
    ledger.assign("w1", "b", 6)
    stale = ledger.on_heartbeat(Heartbeat("a", 4, frozenset(), {("w1", 1): "Stopped"}), 7)
    assert ledger.holder["w1"] == ("b", 2) and stale.assignments == frozenset(), "an old report is old"
    with pytest.raises(ValueError, match="cluster b: its lease expired"):
        ledger.submit(["w2"])
        ledger.assign("w2", "b", 6 + LEASE + 3)
