"""The federation's live path in the embedded world: one manager plane and two worker planes, each a
store with its HTTP API on loopback, the workers with the digital twin and their own controllers, all
on one virtual clock. A TrainingJob submitted to the manager runs in the cheaper worker with its status
mirrored back; cutting that worker off fences its copy once its lease lapses, and the manager
re-dispatches the job to the other worker, never running it in both at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpufleet.api import Cluster, load_objects
from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.cluster import ClusterDrain
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import Event
from gpufleet.api.training import TrainingJob
from gpufleet.cli.client import Client, ServerUnreachableError
from gpufleet.cli.federation_http import HttpManager, HttpWorker
from gpufleet.controllers.plane import build_manager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.federation.link import CLUSTER, FENCED, GENERATION, MANAGED_BY
from gpufleet.federation.mirror import FederationController
from gpufleet.federation.worker import WorkerAgent
from gpufleet.fleet.state import FleetState
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.serve import ApiServer
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

WORKER_FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2}
"""
# The workers have no queue of their own: the manager creates each job's queue there with its grant.

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team}
spec:
  queue: team
  replicas: 1
  worker: {gpus: 8, gpuModel: H100-80GB}
  checkpoint: {intervalSeconds: 60}
  durationSeconds: 3600
"""


def manager_fleet(urls: dict[str, str]) -> str:
    clusters = "".join(
        f"""
---
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {{name: {name}}}
spec:
  connection: {{embedded: {{url: "{url}", tokenSecretRef: {{name: {name}-token, key: token}}}}}}
  pricePerGPUHour: {{H100-80GB: {price}}}
  leaseSeconds: 10
"""
        for price, (name, url) in enumerate(sorted(urls.items()), start=1)
    )
    return (
        """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec: {quotas: {H100-80GB: {nominal: 24}}}
"""
        + clusters
    )


@dataclass
class Plane:
    store: SqliteStore
    tokens: TokenRegistry
    server: ApiServer
    thread: threading.Thread
    runtime: Runtime | None = None
    cut: list[bool] = field(default_factory=lambda: [False])


class Cuttable:
    """A link that fails as an unreachable plane does while `cut[0]` is set: a network partition."""

    def __init__(self, inner: object, cut: list[bool]) -> None:
        self.inner, self.cut = inner, cut

    def __getattr__(self, name: str) -> object:
        method = getattr(self.inner, name)

        def call(*args: object) -> object:
            if self.cut[0]:
                raise ServerUnreachableError("partitioned")
            return method(*args)

        return call


def serve(directory: Path, clock: VirtualClock) -> Plane:
    store = SqliteStore.open(directory, clock=clock.datetime, synchronous="OFF")
    tokens = TokenRegistry(directory)
    server = ApiServer(create_app(store, tokens, now=clock.datetime), state_dir=directory, port=0)
    server.bind()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert server.started.wait(30), "the server did not start"
    return Plane(store, tokens, server, thread)


@pytest.fixture
def planes(tmp_path: Path) -> Iterator[dict[str, Plane]]:
    clock = VirtualClock()
    planes = {name: serve(tmp_path / name, clock) for name in ("manager", "w1", "w2")}
    manager = planes["manager"]
    for obj in load_objects(manager_fleet({n: planes[n].server.url for n in ("w1", "w2")})):
        manager.store.apply(obj)

    def connect(cluster: Cluster) -> object:
        plane = planes[cluster.name]
        return Cuttable(HttpWorker.for_cluster(cluster, plane.tokens.admin_token), plane.cut)

    controller = FederationController(manager.store, connect, grace_seconds=5.0)  # type: ignore[arg-type]
    manager.runtime = Runtime(manager.store, clock=clock, participants=[controller])
    for name in ("w1", "w2"):
        plane = planes[name]
        for obj in load_objects(WORKER_FLEET):
            plane.store.apply(obj)
        controllers = build_manager(plane.store)
        scheduling = next(c for c in controllers.controllers if isinstance(c, SchedulingController))

        def fleet(scheduling: SchedulingController = scheduling) -> FleetState | None:
            return None if scheduling.cache is None else scheduling.cache.fleet

        link = Cuttable(HttpManager(Client(manager.server.url, manager.tokens.admin_token)), plane.cut)
        agent = WorkerAgent(plane.store, name, link, fleet, heartbeat_seconds=2.0)  # type: ignore[arg-type]
        plane.runtime = Runtime(
            plane.store, clock=clock, participants=[Twin(plane.store, clock=clock), controllers, agent]
        )
    yield planes
    for plane in planes.values():
        plane.server.stop()
        plane.thread.join(timeout=30)
        plane.store.close()


def run(planes: dict[str, Plane], seconds: int) -> None:
    """Moves the shared clock a second at a time; every plane settles at each second, and the job never
    runs in two workers at once."""
    clock = planes["manager"].runtime.clock  # type: ignore[union-attr]
    assert isinstance(clock, VirtualClock)
    for _ in range(seconds):
        clock.advance_to(clock.now() + 1)
        for plane in planes.values():
            assert plane.runtime is not None
            plane.runtime.settle()
        assert len(running_in(planes)) <= 1, f"running in two clusters: {running_in(planes)}"


def copy_in(plane: Plane) -> TrainingJob | None:
    found = [j for j in plane.store.list(TrainingJob) if j.name == "llm"]
    return found[0] if found else None


def granted(plane: Plane) -> dict[str, float]:
    """The quota the manager granted in a worker's queue `team`, in GPUs per flavor."""
    return {flavor: q.nominal for flavor, q in plane.store.get(Queue, "team").spec.quotas.items()}


def running_in(planes: dict[str, Plane]) -> list[str]:
    return [
        name
        for name in ("w1", "w2")
        if (job := copy_in(planes[name])) is not None and job.status.phase == "Running"
    ]


def test_a_job_runs_in_a_worker_and_moves_when_its_worker_is_lost(planes: dict[str, Plane]) -> None:
    manager = planes["manager"]
    run(planes, 3)  # the workers report: both Ready
    assert {c.name for c in manager.store.list(Cluster) if c.status.heartbeat_time} == {"w1", "w2"}
    manager.store.apply(load_objects(JOB)[0])
    run(planes, 5)

    job = manager.store.get(TrainingJob, "llm", "team")
    assert job.metadata.annotations[CLUSTER] == "w1", "the cheaper cluster"
    copy = copy_in(planes["w1"])
    assert copy is not None and copy.metadata.annotations[MANAGED_BY] == "manager"
    assert copy.status.phase == "Running" and not copy.spec.suspend
    assert copy_in(planes["w2"]) is None
    assert job.status.phase == "Running", "the worker's status mirrored into the manager"
    assert job.status.nodes == copy.status.nodes

    planes["w1"].cut[0] = True  # w1 loses the manager, and the manager loses w1
    run(planes, 12)  # past w1's lease (10 s from its last accepted heartbeat)
    fenced = copy_in(planes["w1"])
    assert fenced is not None and fenced.metadata.annotations.get(FENCED) == "LeaseExpired"
    assert fenced.spec.suspend and fenced.status.phase != "Running", "w1 stopped it on its own"
    assert manager.store.get(TrainingJob, "llm", "team").metadata.annotations[CLUSTER] == "w1", (
        "the manager waits for the lease and the grace before it moves work"
    )

    run(planes, 8)  # the lease plus the grace have passed
    moved = manager.store.get(TrainingJob, "llm", "team")
    assert moved.metadata.annotations[CLUSTER] == "w2"
    assert moved.metadata.annotations[GENERATION] == "2"
    assert running_in(planes) == ["w2"]
    assert moved.status.phase == "Running" and moved.status.restarts == 1
    # It ran about 20 s in w1 (never checkpointed) until w1 fenced it when its lease lapsed: all lost.
    assert 8 * 10 <= moved.status.lost_gpu_seconds <= 8 * 30, moved.status.lost_gpu_seconds

    planes["w1"].cut[0] = False  # w1 returns: its fenced copy never starts again
    run(planes, 5)
    assert running_in(planes) == ["w2"]


def job(name: str, replicas: int) -> TrainingJob:
    obj = load_objects(
        JOB.replace("name: llm", f"name: {name}").replace("replicas: 1", f"replicas: {replicas}")
    )[0]
    assert isinstance(obj, TrainingJob)
    return obj


def test_a_queue_quota_spans_both_workers(planes: dict[str, Plane]) -> None:
    """The queue's 24 GPUs count over both workers: 16 in w1 and 8 in w2 run, the next 8 wait with the
    quota's reason although w2 still has 8 free."""
    manager = planes["manager"]
    run(planes, 3)
    for name, replicas in (("big", 2), ("small", 1)):
        manager.store.apply(job(name, replicas))
        run(planes, 2)
    manager.store.apply(job("over", 1))
    run(planes, 3)
    held = {j.name: j.metadata.annotations.get(CLUSTER) for j in manager.store.list(TrainingJob)}
    assert held == {"big": "w1", "small": "w2", "over": None}
    over = manager.store.get(TrainingJob, "over", "team")
    assert over.status.phase == "Pending"
    assert over.status.pending_reason is not None and over.status.pending_reason.type == "QuotaExceeded"
    assert [j.name for j in planes["w2"].store.list(TrainingJob)] == ["small"], "nothing sent past the quota"
    granted = {name: planes[name].store.get(Queue, "team") for name in ("w1", "w2")}
    assert {n: q.spec.quotas["H100-80GB"].nominal for n, q in granted.items()} == {"w1": 16, "w2": 8}, (
        "each worker's queue holds what the manager dispatched there"
    )
    assert all(q.metadata.annotations[MANAGED_BY] == "manager" for q in granted.values())


def test_a_job_deleted_in_the_manager_goes_from_its_worker_and_the_workers_events_show_in_the_manager(
    planes: dict[str, Plane],
) -> None:
    manager = planes["manager"]
    run(planes, 3)
    manager.store.apply(job("llm", 1))
    run(planes, 12)  # running in w1, and past the event mirror's period
    assert copy_in(planes["w1"]) is not None and running_in(planes) == ["w1"]
    in_worker = {
        (e.spec.reason, e.spec.message)
        for e in planes["w1"].store.list(Event)
        if (e.spec.involved_kind, e.spec.involved_name) == ("TrainingJob", "llm")
    }
    about = [e for e in manager.store.list(Event) if e.spec.involved_name == "llm"]
    assert in_worker, "the worker recorded what happened to its copy"
    mirrored = {(e.spec.reason, e.spec.message) for e in about if e.spec.source.startswith("w1")}
    assert mirrored == {(reason, f"[w1] {message}") for reason, message in in_worker}
    assert any(e.spec.source == "federation" and e.spec.reason == "Dispatched" for e in about)

    manager.store.apply(job("other", 1))
    run(planes, 3)
    assert copy_in(planes["w1"]) is not None
    assert [j.name for j in planes["w1"].store.list(TrainingJob)] == ["llm", "other"]

    assert granted(planes["w1"]) == {"H100-80GB": 16}
    manager.store.delete(TrainingJob, "llm", "team")
    run(planes, 2)
    assert copy_in(planes["w1"]) is None, "deleted in the manager, deleted in the worker"
    assert granted(planes["w1"]) == {"H100-80GB": 8}, "the grant shrinks with the work"

    planes["w1"].cut[0] = True  # a delete while the worker is away waits for it to answer again
    manager.store.delete(TrainingJob, "other", "team")
    run(planes, 2)
    assert [j.name for j in planes["w1"].store.list(TrainingJob)] == ["other"]
    planes["w1"].cut[0] = False
    run(planes, 3)
    assert not list(planes["w1"].store.list(TrainingJob)), "and it is deleted once it answers"
    assert "team" not in {q.name for q in planes["w1"].store.list(Queue)}, "no work there: its queue goes"


def test_a_queue_the_manager_made_goes_once_nothing_in_the_worker_names_it(planes: dict[str, Plane]) -> None:
    manager, w1 = planes["manager"], planes["w1"]

    def queues() -> list[str]:
        return [q.name for q in w1.store.list(Queue)]

    run(planes, 3)
    manager.store.apply(load_objects(JOB.replace("name: llm", "name: short").replace("3600", "5"))[0])
    run(planes, 15)
    assert manager.store.get(TrainingJob, "short", "team").status.phase == "Succeeded"
    assert w1.store.get(TrainingJob, "short", "team").status.phase == "Succeeded"
    assert queues() == ["team"], "its finished copy still names it"
    assert granted(w1) == {}, "though it is granted nothing"

    # The worker's own work in that queue keeps it too (waiting, suspended, not to run on its quota).
    own = load_objects(
        JOB.replace("name: llm", "name: own").replace("queue: team", "queue: team\n  suspend: true")
    )
    w1.store.apply(own[0])
    manager.store.delete(TrainingJob, "short", "team")
    run(planes, 3)
    assert [j.name for j in w1.store.list(TrainingJob)] == ["own"], "the finished copy went with its job"
    assert queues() == ["team"], "the worker's own job names it"
    w1.store.delete(TrainingJob, "own", "team")
    run(planes, 3)
    assert queues() == [], "nothing names it any more"


def test_a_cluster_drained_with_move_at_checkpoint_lets_its_job_go_after_its_next_checkpoint(
    planes: dict[str, Plane],
) -> None:
    manager = planes["manager"]
    run(planes, 3)
    manager.store.apply(load_objects(JOB.replace("intervalSeconds: 60", "intervalSeconds: 20"))[0])
    run(planes, 30)  # running in w1 since about t=5, its first checkpoint at about 20 s of work
    assert running_in(planes) == ["w1"]
    cluster = manager.store.get(Cluster, "w1")
    drain = ClusterDrain(running="MoveAtCheckpoint", reason="kernel upgrade")
    manager.store.update(
        cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"drain": drain})})
    )
    run(planes, 2)
    assert running_in(planes) == ["w1"], "it runs on until its next checkpoint"
    checkpointed = manager.store.get(TrainingJob, "llm", "team").status.last_checkpoint
    assert checkpointed is not None and checkpointed.step is not None

    run(planes, 25)  # its next checkpoint in w1, then the move
    moved = manager.store.get(TrainingJob, "llm", "team")
    assert moved.metadata.annotations[CLUSTER] == "w2" and running_in(planes) == ["w2"]
    assert copy_in(planes["w1"]) is None
    assert moved.status.restarts == 1 and moved.status.lost_gpu_seconds <= 8 * 2, "moved after a checkpoint"
    carried = [c for c in planes["w2"].store.list(Checkpoint) if c.spec.job == "llm"]
    assert [c.spec.step for c in carried] == [checkpointed.step + 20], "it resumes from the latest step"
    assert any(e.spec.reason == "Drained" for e in manager.store.list(Event) if e.spec.involved_name == "llm")


def test_work_in_a_cluster_deleted_by_hand_moves_only_once_its_lease_has_lapsed(
    planes: dict[str, Plane],
) -> None:
    manager = planes["manager"]
    run(planes, 3)
    manager.store.apply(load_objects(JOB)[0])
    run(planes, 5)
    assert running_in(planes) == ["w1"]
    manager.store.delete(Cluster, "w1")  # w1 still runs the job, and its heartbeats now fail
    run(planes, 5)
    assert manager.store.get(TrainingJob, "llm", "team").metadata.annotations[CLUSTER] == "w1"
    assert copy_in(planes["w2"]) is None, "not moved while w1 may still run it"
    run(planes, 12)  # past w1's lease (10 s) and the grace (5 s): w1 fenced it, the manager moves it
    moved = manager.store.get(TrainingJob, "llm", "team")
    assert moved.metadata.annotations[CLUSTER] == "w2" and running_in(planes) == ["w2"]
    assert any(
        e.spec.reason == "ClusterRemoved" for e in manager.store.list(Event) if e.spec.involved_name == "llm"
    )


def test_a_lease_shortened_in_the_spec_counts_only_from_the_next_heartbeat(planes: dict[str, Plane]) -> None:
    """The manager counts a heartbeat's lease as the worker reported it with that heartbeat: shortening
    spec.leaseSeconds while the worker is cut off must not move work the worker still runs."""
    manager = planes["manager"]
    run(planes, 3)
    manager.store.apply(load_objects(JOB)[0])
    run(planes, 5)
    assert running_in(planes) == ["w1"]
    planes["w1"].cut[0] = True
    cluster = manager.store.get(Cluster, "w1")
    spec = cluster.spec.model_copy(update={"lease_seconds": 3.0})
    manager.store.update(cluster.model_copy(update={"spec": spec}))
    run(planes, 9)  # past 3 s + the 5 s grace, inside the 10 s lease w1 counts with: it still runs it
    assert manager.store.get(TrainingJob, "llm", "team").metadata.annotations[CLUSTER] == "w1"
    run(planes, 8)  # past 10 s + the grace: w1 fenced it, and it moves
    assert running_in(planes) == ["w2"]
