"""The manager's view takes out of each cluster's last report the work it dispatched there that the
report does not count yet, and nothing the report counts already: a worker whose reports lag (a slow or
lossy link) is not over-filled, and one whose report counts the work is not under-filled.

The manager here is the real `FederationController` over in-memory stores; the workers' reports are
written by hand (or by the real `WorkerAgent`) so that each test decides how far they lag."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.api import Cluster, load_objects
from gpufleet.api.cluster import DispatchCount
from gpufleet.api.training import TrainingJob
from gpufleet.cli.fedtwin import Link, StoreManager, StoreWorker
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.federation.link import CLUSTER
from gpufleet.federation.manager import worker_status
from gpufleet.federation.mirror import FederationController
from gpufleet.federation.summary import ClusterSummary, ModelSummary
from gpufleet.federation.take import GangShape
from gpufleet.federation.unreported import (
    SEQUENCE,
    Counted,
    next_sequence,
    sequence_of,
    take_out,
    take_out_all,
)
from gpufleet.federation.worker import WorkerAgent
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.store.memory import MemoryStore
from gpufleet.store.sqlite import SqliteStore

from .twoworkers import MANAGER, MODEL, START, hosts, job


@dataclass
class Fleet:
    """A manager over two workers' stores; the workers' reports are whatever `report` last wrote."""

    manager: MemoryStore = field(default_factory=MemoryStore)
    workers: dict[str, MemoryStore] = field(
        default_factory=lambda: {"w1": MemoryStore(), "w2": MemoryStore()}
    )

    def __post_init__(self) -> None:
        self.manager.apply_many(load_objects(MANAGER))
        links = {name: Link(name) for name in self.workers}
        self.controller = FederationController(
            self.manager, lambda cluster: StoreWorker(self.workers[cluster.name], links[cluster.name])
        )

    def report(self, name: str, fleet: FleetState, at: float, dispatches: DispatchCount | None) -> None:
        cluster = self.manager.get(Cluster, name)
        status = worker_status(fleet, now=to_datetime(at))
        status.dispatches, status.lease_seconds = dispatches, 60.0
        self.manager.update_status(cluster.model_copy(update={"status": status}))

    def submit(self, obj: TrainingJob, at: float) -> str | None:
        """Submits `obj` and runs one manager pass; the cluster it went to, if any."""
        self.manager.create(obj)
        self.controller.step(at)
        return self.held(obj.name).metadata.annotations.get(CLUSTER)

    def held(self, name: str) -> TrainingJob:
        return self.manager.get(TrainingJob, name, "team")

    def sequence(self, name: str) -> int:
        found = sequence_of(self.held(name).metadata.annotations)
        assert found is not None, f"{name} carries its dispatch's number"
        return found


def test_a_report_that_lags_two_dispatches_does_not_let_the_manager_over_fill_the_cluster() -> None:
    fed = Fleet()
    # Both report two free hosts once; then nothing more arrives from them (a slow link).
    for name in ("w1", "w2"):
        fed.report(name, hosts(2), START, DispatchCount(newest=0))
    assert fed.submit(job("a"), START + 1) == "w1", "the cheaper cluster"
    assert fed.submit(job("b"), START + 2) == "w1", "its other host, though the report still says two"
    assert fed.submit(job("c"), START + 3) == "w2", "w1's two hosts are taken by a and b: not a third"
    # The copies reached w1 with the numbers the manager gave them.
    copies = {c.name: sequence_of(c.metadata.annotations) for c in fed.workers["w1"].list(TrainingJob)}
    assert copies == {"a": fed.sequence("a"), "b": fed.sequence("b")}
    assert fed.sequence("a") < fed.sequence("b") < fed.sequence("c")


def test_work_a_report_counts_is_not_taken_out_again() -> None:
    fed = Fleet()
    fed.report("w1", hosts(3), START, DispatchCount(newest=0))
    fed.report("w2", hosts(3), START, DispatchCount(newest=0))
    assert fed.submit(job("a"), START + 1) == "w1"
    # w1 has placed `a`: one host of three busy, and the report says it counts a's dispatch.
    fed.report("w1", hosts(3, busy=1), START + 1.5, DispatchCount(newest=fed.sequence("a")))
    assert fed.submit(job("gang", replicas=2), START + 2) == "w1", (
        "two hosts free there: a is not taken twice"
    )


def test_work_the_worker_holds_but_has_not_placed_is_taken_out_until_it_is() -> None:
    fed = Fleet()
    fed.report("w1", hosts(2), START, DispatchCount(newest=0))
    fed.report("w2", hosts(2), START, DispatchCount(newest=0))
    assert fed.submit(job("a"), START + 1) == "w1"
    # `a` reached w1 but waits there: the figures (two free hosts) do not count it, and say so.
    a = fed.sequence("a")
    fed.report("w1", hosts(2), START + 1.5, DispatchCount(newest=a, uncounted=[a]))
    assert fed.submit(job("gang", replicas=2), START + 2) == "w2", "one host of w1 is a's"


def test_a_report_of_an_older_worker_release_counts_everything_as_before() -> None:
    fed = Fleet()
    fed.report("w1", hosts(1), START, None)
    fed.report("w2", hosts(1), START, None)
    assert fed.submit(job("a"), START + 1) == "w1"
    assert fed.submit(job("b"), START + 2) == "w1", "no dispatches named: the figures are taken as they are"


def test_the_worker_reports_the_newest_dispatch_it_holds_and_those_it_has_not_placed(tmp_path: Path) -> None:
    manager = MemoryStore()
    manager.apply_many(load_objects(MANAGER))
    store = SqliteStore.open(tmp_path, synchronous="OFF")
    fleet = hosts(2)
    agent = WorkerAgent(store, "w1", StoreManager(manager, Link("w1")), lambda: fleet, heartbeat_seconds=10.0)
    for name, number in (("a", 7), ("b", 9)):
        copy = job(name)
        copy.metadata.annotations.update({"gpufleet.io/managed-by": "manager", SEQUENCE: str(number)})
        copy.spec.suspend = True
        store.create(copy)
    agent.step(START)
    assert manager.get(Cluster, "w1").status.dispatches == DispatchCount(newest=9, uncounted=[7, 9])

    # The worker's scheduler places `a` (its GPUs leave the free count) and reports it in the instant;
    # the job's status says so a round later, which is reported in the same instant too: the manager
    # must not take `a` out of figures that already count it.
    fleet.allocate("a-0", 0, PodRequest(gpus=8), tuple(range(8)))
    agent.step(START)
    assert manager.get(Cluster, "w1").status.dispatches == DispatchCount(newest=9, uncounted=[7, 9])
    placed = store.get(TrainingJob, "a", "team")
    placed.status.replicas = 1
    store.update_status(placed)
    agent.step(START)
    reported = manager.get(Cluster, "w1").status
    assert reported.dispatches == DispatchCount(newest=9, uncounted=[9])
    assert reported.capacity[MODEL].free_gpus == 8
    store.close()


def test_take_out_takes_what_is_left_when_the_gang_no_longer_fits_the_report() -> None:
    summary = ClusterSummary(
        "w1", {MODEL: ModelSummary(gpus=16, free_gpus=4, free_domains={"host": {4: 1}, "nvlink": {4: 1}})}
    )
    take_out(summary, MODEL, GangShape(whole=(8,)))
    assert summary.models[MODEL].free_gpus == 0 and summary.models[MODEL].free_domains["host"] == {}
    take_out(summary, "A100-40GB", GangShape(whole=(8,)))  # a model it no longer reports: nothing to take
    assert summary.models[MODEL].free_gpus == 0


def test_counted_dispatches_and_their_numbers() -> None:
    report = Counted(newest=20, uncounted=frozenset({15}))
    assert report.counts(10) and report.counts(20) and report.counts(None)
    assert not report.counts(15), "there, not placed"
    assert not report.counts(21), "sent after the report"
    clusters = {
        "w1": ClusterSummary("w1", {MODEL: ModelSummary(gpus=8, free_gpus=8, free_domains={"host": {8: 1}})})
    }
    held = [("w1", 10, MODEL, GangShape(whole=(4,))), ("w1", 21, MODEL, GangShape(whole=(2,)))]
    assert take_out_all(clusters, {"w1": report}, held) == [("w1", 21)]
    assert clusters["w1"].models[MODEL].free_gpus == 6
    # Numbers grow with the clock and within one instant; a manager restarted numbers after them.
    first = next_sequence(0, 100.0)
    assert next_sequence(first, 100.0) == first + 1 and next_sequence(first + 1, 101.0) > first + 1
