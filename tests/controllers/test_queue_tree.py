"""One bad Queue never stops scheduling: it is left out of the quota tree and marked, the rest runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue, QueueSpec
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import Event, OwnerRef, Pod, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.controllers import convert
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .test_scheduling import ready_node, run


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)


def queue(name: str, parent: str | None = None, gpus: int = 8) -> Queue:
    quotas = {"H100": FlavorQuota(nominal=gpus)}
    return Queue(metadata=ObjectMeta(name=name), spec=QueueSpec(parent=parent, quotas=quotas))


def submit(store: SqliteStore, name: str, queue_name: str, gpus: int = 4) -> None:
    store.create(
        Workload(
            metadata=ObjectMeta(name=name),
            spec=WorkloadSpec(
                owner=OwnerRef(kind="TrainingJob", name=name),
                queue=queue_name,
                pod_sets=[WorkloadPodSet(count=1, request=PodRequest(gpus=gpus))],
            ),
        )
    )


def test_usable_queues_leave_out_unknown_parents_cycles_and_their_subtrees() -> None:
    queues = [
        queue("org"),
        queue("team-a", "org"),
        queue("qbad", "nonexistent"),
        queue("below-bad", "qbad"),
        queue("x", "y"),
        queue("y", "x"),
    ]
    usable, broken = convert.usable_queues(queues)
    assert [q.name for q in usable] == ["org", "team-a"]
    assert "unknown parent queue 'nonexistent'" in broken["qbad"]
    assert "'qbad'" in broken["below-bad"]
    assert "cycle" in broken["x"] and "cycle" in broken["y"]


def test_a_queue_with_an_unknown_parent_does_not_stop_scheduling(store: SqliteStore) -> None:
    ready_node(store, "n1")
    store.create(queue("team-a"))
    # Stored behind the API's back (an older store, or written directly): the controller copes.
    store.create(queue("qbad", "nonexistent"))
    submit(store, "good", "team-a")
    submit(store, "stuck", "qbad")
    submit(store, "lost", "team-zzz")
    controller = SchedulingController(store)
    run(store, controller)
    assert store.get(Workload, "good").status.phase == "Admitted"
    stuck = store.get(Workload, "stuck").status
    assert stuck.phase == "Pending"
    assert stuck.pending_reason is not None and stuck.pending_reason.type == "QueueInvalid"
    assert "nonexistent" in stuck.pending_reason.message
    lost = store.get(Workload, "lost").status.pending_reason
    assert lost is not None and lost.type == "QueueNotFound"
    valid = {c.type: c for c in store.get(Queue, "qbad").status.conditions}["Valid"]
    assert (valid.status, valid.reason) == ("False", "InvalidParent")
    assert "nonexistent" in (valid.message or "")
    warnings = [e for e in store.list(Event) if e.spec.involved_name == "qbad"]
    assert len(warnings) == 1 and warnings[0].spec.reason == "InvalidQueue"
    # Once the parent exists the queue joins the tree and its work runs.
    store.create(queue("nonexistent"))
    run(store, controller, now=1.0)
    assert store.get(Workload, "stuck").status.phase == "Admitted"
    valid = {c.type: c for c in store.get(Queue, "qbad").status.conditions}["Valid"]
    assert valid.status == "True"


def test_a_queue_deleted_under_running_work_stops_nothing(store: SqliteStore) -> None:
    """As in the Kubernetes world: its admitted work runs on with its GPUs held, uncounted by any
    quota, and scheduling goes on for everyone else; once that work ends its GPUs are free."""
    ready_node(store, "n1")  # 8 GPUs
    store.create(queue("team-a"))
    store.create(queue("team-b"))
    submit(store, "running", "team-a")
    controller = SchedulingController(store)
    run(store, controller)
    assert store.get(Workload, "running").status.phase == "Admitted"
    store.delete(Queue, "team-a")
    submit(store, "other", "team-b")
    submit(store, "third", "team-b")
    run(store, controller, now=1.0)
    assert store.get(Workload, "running").status.phase == "Admitted"
    assert store.get(Workload, "other").status.phase == "Admitted"
    third = store.get(Workload, "third").status  # the node's last 4 GPUs are still held
    assert third.phase == "Pending" and third.pending_reason is not None
    assert third.pending_reason.type == "NoFit", third.pending_reason
    assert len([p for p in store.list(Pod) if p.spec.workload == "running"]) == 1
    controller.needs_rebuild = True  # a restart sees the same
    run(store, controller, now=2.0)
    assert store.get(Workload, "third").status.phase == "Pending"
    done = store.get(Workload, "running")
    store.update(done.model_copy(update={"spec": done.spec.model_copy(update={"active": False})}))
    run(store, controller, now=3.0)
    assert store.get(Workload, "third").status.phase == "Admitted"
