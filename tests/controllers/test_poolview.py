"""The pool controller's view of pools, nodes, pods and node demands is what listing the store gives.

The controller no longer lists the store on each reconcile; it keeps a view from events. If the view
drifted (an event missed, applied twice, a pod counted on the wrong node), idle GPU-hours and
autoscaling would go wrong silently, so the view is compared with a fresh listing at every step.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.api.runtime import Pod
from gpufleet.controllers.plane import build_manager
from gpufleet.controllers.pools import PoolController
from gpufleet.controllers.poolview import PoolView
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import NodeLoss, SpotInterruption, Twin

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: fixed}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: 3.0, capacityType: spot}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: burst}
spec:
  gpuModel: A100-80GB
  gpusPerNode: 8
  pricePerGPUHour: 1.0
  autoscaling: {minNodes: 0, maxNodes: 3, scaleDownDelaySeconds: 300}
"""


def job(name: str, replicas: int, gpus: int, model: str, seconds: int) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  worker: {{gpus: {gpus}, gpuModel: {model}}}
  restartPolicy: {{maxRestarts: 5, backoffSeconds: 0}}
  durationSeconds: {seconds}
"""


def snapshot(view: PoolView) -> dict[str, object]:
    return {
        "pools": {name: p.metadata.resource_version for name, p in view.pools.items()},
        "nodes": {name: n.metadata.resource_version for name, n in view.nodes.items()},
        "pods": dict(view.pods),
        "busy": view.busy(),
        "milli": dict(view.node_milli),
        "demanding": {key: w.metadata.resource_version for key, w in view.demanding.items()},
        "pools' counts": {
            pool: (sorted(g.members), g.ready, g.lost, g.interrupted, g.ready_milli)
            for pool, g in view.groups.items()
            if g.members
        },
        "pools' nodes in order": {pool: [n.name for n in view.nodes_of(pool)] for pool in view.pools},
    }


def fresh(store: SqliteStore) -> dict[str, object]:
    view = PoolView(store)
    view.relist()
    return snapshot(view)


def test_the_view_matches_the_store_through_scaling_failures_and_compaction(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime, event_retention=50)
    twin = Twin(store, clock=clock)
    manager = build_manager(store)
    runtime = Runtime(store, clock=clock, participants=[twin, manager])
    controller = next(c for c in manager.controllers if isinstance(c, PoolController))
    for obj in load_objects(FLEET):
        store.apply(obj)
    runtime.run_for(5)
    assert snapshot(controller.view) == fresh(store)
    submissions = [
        job("small", 1, 4, "H100-80GB", 600),
        job("wide", 2, 8, "H100-80GB", 900),
        job("burst", 2, 8, "A100-80GB", 400),  # grows the autoscaled pool from zero
    ]
    for text in submissions:
        for obj in load_objects(text):
            store.apply(obj)
        for _ in range(6):
            runtime.run_for(20)
            assert snapshot(controller.view) == fresh(store)
    bound = [p for p in store.list(Pod) if p.spec.node_name and not p.terminated]
    assert bound, "the jobs run"
    twin.inject(NodeLoss(node=bound[0].spec.node_name))
    for _ in range(10):
        runtime.run_for(60)
        assert snapshot(controller.view) == fresh(store)
    # A spot notice: the node stops counting toward the pool's size, a replacement comes first.
    noticed = store.list("Node", label_selector={"gpufleet.io/pool": "fixed"}).items[0].name
    twin.inject(SpotInterruption(node=noticed))
    for _ in range(4):
        runtime.run_for(45)
        assert snapshot(controller.view) == fresh(store)
    assert noticed not in {n.name for n in store.list("Node")}
    # With a retention of 50 events the log was compacted many times; the view still agrees, and
    # the pools were scaled back down and counted their idle time.
    runtime.run_for(1800)
    assert snapshot(controller.view) == fresh(store)
    burst = store.get("GPUPool", "burst")
    assert burst.status.nodes == 0 and burst.status.idle_gpu_hours > 0
    fixed = store.get("GPUPool", "fixed")
    assert fixed.status.ready_nodes == 2 and fixed.status.allocated_gpu_milli == 0


def test_a_compacted_log_makes_the_view_list_again(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)
    for obj in load_objects(FLEET):
        store.apply(obj)
    view = PoolView(store)
    view.relist()
    store.apply(next(iter(load_objects(FLEET.replace("nodes: 2", "nodes: 3")))))
    store.compact(keep=0)
    assert view.catch_up() == []
    assert view.pools["fixed"].spec.nodes == 3
    assert view.cursor == int(store.resource_version)


def test_only_pod_events_that_change_the_counts_make_the_pool_look_again(tmp_path: Path) -> None:
    """A pod bound, finished or bound elsewhere moves the pool's counts; one starting to run, or a
    terminated one deleted, does not, and the pool is not reconciled for it."""
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)
    manager = build_manager(store)
    controller = next(c for c in manager.controllers if isinstance(c, PoolController))
    for obj in load_objects(FLEET):
        store.apply(obj)
    Runtime(store, clock=clock, participants=[manager]).run_for(1)
    nodes = [n.name for n in store.list("Node", label_selector={"gpufleet.io/pool": "fixed"})]
    template = next(
        iter(
            load_objects(f"""
apiVersion: gpufleet.io/v1alpha1
kind: Pod
metadata: {{name: p}}
spec:
  nodeName: {nodes[0]}
  gpus: [0, 1]
  workload: w
  owner: {{kind: TrainingJob, name: j}}
  podSet: main
  index: 0
""")
        )
    )
    assert isinstance(template, Pod)

    def keys(*, deleted: bool = False) -> list[tuple[str, str]]:
        """The pools the pod's latest event makes the controller look at again."""
        [event] = store.events_since(controller.view.cursor or 0, kinds=["Pod"])
        assert (event.type == "DELETED") == deleted
        controller.view.apply(event)
        return controller.keys_for(event)

    pod = store.create(template)
    assert keys() == [("", "fixed")]  # bound: 2 GPUs held
    pod = store.update_status(
        pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Running"})})
    )
    assert keys() == []  # running: still the same 2 GPUs
    moved = pod.model_copy(update={"spec": pod.spec.model_copy(update={"node_name": nodes[1]})})
    pod = store.update(moved)
    assert keys() == [("", "fixed")]  # held on another node now
    pod = store.update_status(
        pod.model_copy(update={"status": pod.status.model_copy(update={"phase": "Succeeded"})})
    )
    assert keys() == [("", "fixed")]  # terminated: its GPUs are free again
    store.delete("Pod", "p")
    assert keys(deleted=True) == []  # a terminated pod deleted: nothing held changes
    assert snapshot(controller.view) == fresh(store)
