"""The TrainingJob controller's view of jobs, workloads, pods and checkpoints is what the store holds.

The controller no longer reads the store on each reconcile; it keeps a view from events. If the view
drifted (an event missed, a pod filed under the wrong job, a checkpoint of a deleted job kept), a
job's status, restarts or resume point would go wrong silently, so the view is compared with the
store at every step, through checkpoints, a node loss, a deleted job and a compacted event log.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.runtime import Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob
from gpufleet.controllers.jobview import JobView
from gpufleet.controllers.plane import build_manager
from gpufleet.controllers.training import TrainingJobController
from gpufleet.store.memory import MemoryStore
from gpufleet.store.protocol import Store
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import NodeLoss, Twin

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: fixed}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 3}
"""


def job(name: str, replicas: int, seconds: int) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: team}}
spec:
  replicas: {replicas}
  worker: {{gpus: 8}}
  checkpoint: {{intervalSeconds: 120}}
  restartPolicy: {{maxRestarts: 5, backoffSeconds: 0}}
  durationSeconds: {seconds}
"""


Versions = dict[tuple[str, str], object]


def snapshot(view: JobView) -> dict[str, Versions]:
    jobs = {key: j.metadata.resource_version for key, j in view.jobs.items()}
    return {
        "jobs": jobs,
        "workloads": {key: w.metadata.resource_version for key, w in view.workloads.items()},
        "pods": {
            key: [(p.name, p.metadata.resource_version) for p in view.pods_of(*key)]
            for key in jobs
            if view.pods_of(*key)
        },
        "checkpoints": {
            key: [(c.name, c.metadata.resource_version) for c in view.checkpoints_of(*key)]
            for key in jobs
            if view.checkpoints_of(*key)
        },
    }


def from_store(store: SqliteStore) -> dict[str, Versions]:
    jobs = {(j.namespace or "", j.name): j.metadata.resource_version for j in store.list(TrainingJob)}
    pods = {
        key: [
            (p.name, p.metadata.resource_version)
            for p in store.list(Pod, namespace=key[0], label_selector={JOB_LABEL: key[1]})
        ]
        for key in jobs
    }
    checkpoints = {
        key: [
            (c.name, c.metadata.resource_version)
            for c in store.list(Checkpoint, namespace=key[0])
            if c.spec.job == key[1]
        ]
        for key in jobs
    }
    return {
        "jobs": jobs,
        "workloads": {
            (w.namespace or "", w.name): w.metadata.resource_version for w in store.list(WorkloadObject)
        },
        "pods": {key: found for key, found in pods.items() if found},
        "checkpoints": {key: found for key, found in checkpoints.items() if found},
    }


def control_plane(store: Store, clock: VirtualClock) -> tuple[Twin, Runtime, TrainingJobController]:
    """The twin and the controllers on one runtime, and the TrainingJob controller among them."""
    twin = Twin(store, clock=clock)
    manager = build_manager(store)
    runtime = Runtime(store, clock=clock, participants=[twin, manager])
    return twin, runtime, next(c for c in manager.controllers if isinstance(c, TrainingJobController))


def test_the_view_matches_the_store_through_checkpoints_a_node_loss_and_compaction(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime, event_retention=50)
    twin, runtime, controller = control_plane(store, clock)
    for obj in load_objects(FLEET):
        store.apply(obj)
    runtime.run_for(5)
    for text in (job("one", 1, 600), job("two", 2, 900), job("gone", 1, 3000)):
        for obj in load_objects(text):
            store.apply(obj)
        for _ in range(4):
            runtime.run_for(30)
            assert snapshot(controller.view) == from_store(store)
    assert store.list(Checkpoint).items, "the running jobs checkpoint"
    node = next(p.spec.node_name for p in store.list(Pod) if p.spec.node_name and not p.terminated)
    twin.inject(NodeLoss(node=node))
    store.delete(TrainingJob, "gone", "team")
    for _ in range(10):
        runtime.run_for(60)
        assert snapshot(controller.view) == from_store(store)
    # A deleted job's Workload is collected, and with it the capacity its pods held.
    assert [w.name for w in store.list(WorkloadObject) if w.metadata.labels.get(JOB_LABEL) == "gone"] == []
    assert [p.name for p in store.list(Pod) if p.metadata.labels.get(JOB_LABEL) == "gone"] == []
    runtime.run_for(1800)
    assert snapshot(controller.view) == from_store(store)
    finished = {j.name: j.status for j in store.list(TrainingJob)}
    assert {name: s.phase for name, s in finished.items()} == {"one": "Succeeded", "two": "Succeeded"}
    assert sum(s.restarts for s in finished.values()) >= 1, "the lost node restarted a job"
    assert all(s.last_checkpoint is not None for s in finished.values())


def test_a_compacted_log_makes_the_view_list_again(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)
    for obj in load_objects(job("one", 1, 600)):
        store.apply(obj)
    view = JobView(store)
    view.relist()
    for obj in load_objects(job("one", 2, 600)):
        store.apply(obj)
    store.compact(keep=0)
    assert view.catch_up() == []
    assert view.jobs[("team", "one")].spec.replicas == 2
    assert view.cursor == int(store.resource_version)


def test_the_view_moves_with_the_manager_past_events_it_does_not_follow(tmp_path: Path) -> None:
    # Nodes come and go while no job changes: the manager reads their events for the other controllers,
    # and the job view, which has seen every event of its kinds up to there, moves its cursor too.
    clock = VirtualClock()
    store = MemoryStore(clock=clock.datetime)
    twin, runtime, controller = control_plane(store, clock)
    for obj in load_objects(FLEET + "---" + job("one", 1, 600)):
        store.apply(obj)
    runtime.run_for(5)
    node = next(p.spec.node_name for p in store.list(Pod) if p.spec.node_name)
    idle = next(n.name for n in store.list("Node") if n.name != node)
    twin.inject(NodeLoss(node=idle))
    runtime.run_for(5)
    assert controller.view.cursor == int(store.resource_version)
    relists: list[int] = []
    controller.view.relist = lambda: relists.append(1)  # type: ignore[method-assign]
    store.compact(keep=0)
    for obj in load_objects(job("one", 2, 600)):
        store.apply(obj)
    runtime.run_for(5)
    assert relists == []
    assert controller.view.jobs[("team", "one")].spec.replicas == 2


def test_a_deleted_job_is_looked_at_once_and_everything_of_it_goes(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)
    _, runtime, controller = control_plane(store, clock)
    for obj in load_objects(FLEET + "---" + job("gone", 2, 3000)):
        store.apply(obj)
    runtime.run_for(300)
    assert store.get(TrainingJob, "gone", "team").status.phase == "Running"
    assert store.list(Checkpoint).items and ("team", "gone") in controller.with_series
    looked: list[tuple[str, str]] = []
    reconcile = controller.reconcile

    def counted(key: tuple[str, str], now: float) -> float | None:
        looked.append(key)
        return reconcile(key, now)

    controller.reconcile = counted  # type: ignore[method-assign]
    store.delete(TrainingJob, "gone", "team")
    runtime.run_for(60)
    # Its Workload, its two pods and its checkpoints go after it, one event each: none is a reason
    # to look at the job again, but what the first look left behind would be.
    assert looked == [("team", "gone")]
    assert store.list(WorkloadObject).items == [] and store.list(Pod).items == []
    assert ("team", "gone") not in controller.with_series and ("team", "gone") not in controller.specs
    assert controller.due == {}
    for obj in load_objects(job("gone", 1, 60)):  # the same name again is a new job
        store.apply(obj)
    runtime.run_for(120)
    assert store.get(TrainingJob, "gone", "team").status.phase == "Succeeded"
