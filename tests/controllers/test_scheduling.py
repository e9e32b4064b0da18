"""The scheduling controller on its own: rebuild, orphans, and assume-then-write."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.errors import ConflictError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import (
    Node,
    NodeSpec,
    OwnerRef,
    Pod,
    PodSpec,
    Workload,
    WorkloadPodSet,
    WorkloadSpec,
)
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    clock = VirtualClock()
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)


def ready_node(store: SqliteStore, name: str, gpus: int = 8) -> None:
    node = store.create(Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100", gpus=gpus)))
    store.update_status(node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})}))


def workload(store: SqliteStore, name: str, gpus: int = 8) -> Workload:
    return store.create(
        Workload(
            metadata=ObjectMeta(name=name),
            spec=WorkloadSpec(
                owner=OwnerRef(kind="TrainingJob", name=name),
                pod_sets=[WorkloadPodSet(count=1, request=PodRequest(gpus=gpus))],
            ),
        )
    )


def run(store: SqliteStore, controller: SchedulingController, now: float = 0.0) -> None:
    manager = ControllerManager(store, [controller])
    for _ in range(3):
        manager.step(now)


def test_admits_binds_pods_to_gpus_and_writes_status(store: SqliteStore) -> None:
    ready_node(store, "n1")
    workload(store, "a", gpus=4)
    workload(store, "b", gpus=4)
    workload(store, "c", gpus=4)
    controller = SchedulingController(store)
    run(store, controller)
    phases = {w.name: w.status.phase for w in store.list(Workload)}
    assert phases == {"a": "Admitted", "b": "Admitted", "c": "Pending"}
    assert store.get(Workload, "c").status.pending_reason.type == "NoFit"
    gpus = sorted(g for p in store.list(Pod) for g in p.spec.gpus)
    assert gpus == list(range(8))


def test_a_failed_write_is_forgotten_and_retried(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    ready_node(store, "n1")
    workload(store, "a")
    controller = SchedulingController(store)
    real = store.update_status
    calls = {"n": 0}

    def flaky(obj):
        if isinstance(obj, Workload) and obj.status.phase == "Admitted" and calls["n"] == 0:
            calls["n"] += 1
            raise ConflictError("lost a race")
        return real(obj)

    monkeypatch.setattr(store, "update_status", flaky)
    run(store, controller)
    assert controller.stats.forgotten == 1
    assert store.get(Workload, "a").status.phase == "Admitted"
    assert len(store.list(Pod).items) == 1
    assert controller.cache is not None and len(controller.cache.fleet.allocations) == 1


def test_rebuild_reinstates_bound_pods_and_deletes_orphans(store: SqliteStore) -> None:
    ready_node(store, "n1")
    workload(store, "a")
    first = SchedulingController(store)
    run(store, first)
    # A pod left behind by a crash between creating pods and admitting their workload:
    orphan_owner = workload(store, "b")
    store.update(
        orphan_owner.model_copy(update={"spec": orphan_owner.spec.model_copy(update={"active": False})})
    )
    store.create(
        Pod(
            metadata=ObjectMeta(name="b-main-0"),
            spec=PodSpec(
                workload="b",
                owner=OwnerRef(kind="TrainingJob", name="b"),
                pod_set="main",
                index=0,
                node_name="n1",
                gpus=[0],
                gpu_milli=1000,
            ),
        )
    )
    second = SchedulingController(store)
    run(store, second)
    assert [p.name for p in store.list(Pod)] == ["a-main-0"]
    assert second.cache is not None
    assert list(second.cache.admitted) == ["default/a"]
    assert int(second.cache.fleet.whole_free[0]) == 0
