"""A bug the scheduler meets on one workload or node is that object's problem: the others are scheduled,
the object waits out of the queue (its status says why) until it changes, and what it holds stays
held. A controller whose step raises stops neither the others nor the next rounds."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import Node, NodeSpec, OwnerRef, Pod, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.controllers import convert
from gpufleet.controllers.manager import RETRY_SECONDS, ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.scheduling.actions import Actions
from gpufleet.store.protocol import WatchEvent
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

pytestmark = pytest.mark.contained_failures
PlacementBug = Callable[[Callable[[str], bool]], dict[str, bool]]


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)


def _node(store: SqliteStore, name: str) -> None:
    node = store.create(Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100", gpus=8)))
    store.update_status(node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})}))


def _workload(store: SqliteStore, name: str, gpus: int) -> None:
    owner = OwnerRef(kind="TrainingJob", name=name)
    pod_sets = [WorkloadPodSet(count=1, request=PodRequest(gpus=gpus))]
    store.create(Workload(metadata=ObjectMeta(name=name), spec=WorkloadSpec(owner=owner, pod_sets=pod_sets)))


def _steps(manager: ControllerManager, now: float = 0.0) -> None:
    for _ in range(3):
        manager.step(now)


def _phases(store: SqliteStore) -> dict[str, str]:
    return {w.name: w.status.phase for w in store.list(Workload)}


def _touch(store: SqliteStore, name: str) -> None:
    obj = store.get(Workload, name)
    store.update(obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"labels": {"t": "1"}})}))


def _bad_waits_alone(store: SqliteStore, caplog: pytest.LogCaptureFixture, error: str) -> ControllerManager:
    """Runs the scheduler over workloads a, bad and z: a and z start, bad waits saying `error`."""
    manager = ControllerManager(store, [SchedulingController(store)])
    with caplog.at_level(logging.ERROR, logger="gpufleet.controllers.failures"):
        _steps(manager)
    assert _phases(store) == {"a": "Admitted", "bad": "Pending", "z": "Admitted"}
    reason = store.get(Workload, "bad").status.pending_reason
    assert reason is not None and reason.type == "SchedulingError"
    assert error in reason.message
    return manager


def test_a_workload_the_scheduler_fails_on_waits_alone_until_it_changes(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _node(store, "n1")
    for name in ("a", "bad", "z"):
        _workload(store, name, gpus=2)
    real = convert.core_workload
    bug = {"on": True}

    def core_workload(obj: Workload):  # type: ignore[no-untyped-def]
        if obj.name == "bad" and bug["on"]:
            raise ZeroDivisionError("a bug its numbers trip")
        return real(obj)

    monkeypatch.setattr(convert, "core_workload", core_workload)
    manager = _bad_waits_alone(store, caplog, "ZeroDivisionError: a bug its numbers trip")
    assert "workload default/bad is left out of scheduling" in caplog.text
    # Once, not at every pass: it is not tried again while it is unchanged.
    assert manager.contained_failures == 1
    _steps(manager, now=60.0)
    assert manager.contained_failures == 1
    bug["on"] = False
    _touch(store, "bad")
    _steps(manager, now=61.0)
    assert _phases(store)["bad"] == "Admitted"


def test_a_workload_whose_placement_raises_waits_alone_logged_and_counted(
    store: SqliteStore, placement_bug: PlacementBug, caplog: pytest.LogCaptureFixture
) -> None:
    _node(store, "n1")
    for name in ("a", "bad", "z"):
        _workload(store, name, gpus=2)
    bug = placement_bug(lambda name: name == "default/bad")
    manager = _bad_waits_alone(store, caplog, "OverflowError: a number placement cannot take")
    # What an operator, the simulator's check and the test suite's watch go by: one log line with the
    # traceback of where placement raised, and one contained failure.
    [record] = [r for r in caplog.records if "workload default/bad is left out" in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is OverflowError
    assert "in place_workload" in caplog.text
    assert manager.contained_failures == 1
    # Out of the queue until it changes: the periodic passes and the others' changes leave it alone.
    _workload(store, "later", gpus=2)
    _steps(manager, now=120.0)
    assert manager.contained_failures == 1 and _phases(store)["later"] == "Admitted"
    bug["on"] = False
    _touch(store, "bad")
    _steps(manager, now=121.0)
    assert _phases(store)["bad"] == "Admitted"


def test_an_admission_that_fails_is_undone_and_the_others_are_admitted(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _node(store, "n1")
    for name in ("a", "bad", "z"):
        _workload(store, name, gpus=4)
    real = Actions._pod_for

    def pod_for(self: Actions, obj: Workload, alloc, attempt: int) -> Pod:  # type: ignore[no-untyped-def]
        if obj.name == "bad":
            raise ValueError("a pod no check foresaw")
        return real(self, obj, alloc, attempt)

    monkeypatch.setattr(Actions, "_pod_for", pod_for)
    controller = SchedulingController(store)
    manager = ControllerManager(store, [controller])
    _steps(manager)
    # Its assumption was forgotten: the GPUs it would have taken went to the next workload.
    assert _phases(store) == {"a": "Admitted", "bad": "Pending", "z": "Admitted"}
    assert sorted(p.spec.workload for p in store.list(Pod)) == ["a", "z"]
    assert controller.cache is not None and "bad" not in controller.cache.admitted
    assert manager.contained_failures == 1


def test_a_running_workload_the_rebuild_fails_on_keeps_its_gpus(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _node(store, "n1")
    _workload(store, "running", gpus=8)
    controller = SchedulingController(store)
    manager = ControllerManager(store, [controller])
    _steps(manager)
    assert _phases(store) == {"running": "Admitted"}
    real = convert.core_workload

    def core_workload(obj: Workload):  # type: ignore[no-untyped-def]
        if obj.name == "running":
            raise KeyError("a bug")
        return real(obj)

    monkeypatch.setattr(convert, "core_workload", core_workload)
    controller.needs_rebuild = True  # a restart, or a queue changed
    _workload(store, "next", gpus=8)
    _steps(manager, now=10.0)
    # Its pod runs on and holds its GPUs: nothing else is placed on them.
    assert [p.spec.workload for p in store.list(Pod)] == ["running"]
    assert _phases(store) == {"running": "Admitted", "next": "Pending"}
    assert manager.contained_failures == 1


class _Failing:
    """A controller whose step raises until it is fixed."""

    name = "failing"
    kinds = ("Node",)

    def __init__(self) -> None:
        self.broken = True
        self.steps = 0
        self.resyncs = 0

    def resync(self, now: float) -> None:
        self.resyncs += 1

    def observe(self, event: WatchEvent, now: float) -> None:
        pass

    def step(self, now: float) -> float | None:
        self.steps += 1
        if self.broken:
            raise RuntimeError("a bug in a step")
        return None


def test_a_controller_whose_step_raises_stops_neither_the_others_nor_itself(store: SqliteStore) -> None:
    _node(store, "n1")
    _workload(store, "a", gpus=8)
    failing, scheduling = _Failing(), SchedulingController(store)
    manager = ControllerManager(store, [failing, scheduling])
    wake = manager.step(0.0)
    assert _phases(store) == {"a": "Admitted"}
    assert failing.steps == 1 and failing.resyncs == 2  # the first listing, then the one after failing
    assert wake == RETRY_SECONDS and manager.contained_failures == 1
    manager.step(1.0)
    assert failing.steps == 1  # resting: a failure that comes back does not spin
    failing.broken = False
    manager.step(RETRY_SECONDS)
    assert failing.steps == 2 and manager.contained_failures == 1
