"""A job's and a pool's status are written once per instant, and say what writing at once said.

Under a runtime the TrainingJob and pool controllers hold each status they compute until the
instant has settled (`controllers.heldstatus`). Users rely on three things that must survive it:
the job's Events list every transition in order (Admitted, then Running), the status read after the
instant is the one writing at once would have left, and the pool's idle GPU-hours are the same. So
each world is run twice, once holding and once writing at the end of every manager step (as a
manager stepped by hand does), and compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.api.labels import job_workload_name
from gpufleet.api.pool import GPUPool
from gpufleet.api.runtime import Event, Workload
from gpufleet.api.training import TrainingJob, TrainingJobStatus
from gpufleet.controllers.heldstatus import HeldStatuses
from gpufleet.controllers.plane import build_manager
from gpufleet.controllers.pools import PoolController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: fixed}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: 2.0}
"""

JOBS = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: one, namespace: team}
spec: {replicas: 2, worker: {gpus: 8}, durationSeconds: 600}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: two, namespace: team}
spec: {replicas: 2, worker: {gpus: 8}, durationSeconds: 900}
"""

PHASES = ("Pending", "Admitted", "Running", "Succeeded", "Failed")


class World:
    def __init__(self, tmp_path: Path, *, held: bool, pool_write_seconds: float = 0.0) -> None:
        self.clock = VirtualClock()
        self.store = SqliteStore.open(tmp_path, synchronous="OFF", clock=self.clock.datetime)
        manager = build_manager(self.store, pool_write_seconds=pool_write_seconds)
        self.pools = next(c for c in manager.controllers if isinstance(c, PoolController))
        self.runtime = Runtime(
            self.store, clock=self.clock, participants=[Twin(self.store, clock=self.clock), manager]
        )
        if not held:
            manager.held = False  # as a manager stepped by hand: each step ends with its writes
        for obj in load_objects(FLEET):
            self.store.apply(obj)
        self.runtime.run_for(5)

    def submit(self) -> str:
        """Submits both jobs at one instant and settles it; returns the version before it."""
        version = self.store.resource_version
        self.store.apply_many(load_objects(JOBS))
        self.runtime.settle()
        return version

    def writes_since(self, version: str, kind: str) -> dict[str, int]:
        """Per object of `kind`, its changes logged after `version` (status writes, after a create)."""
        out: dict[str, int] = {}
        for event in self.store.events_since(version, kinds=[kind]):
            if event.type == "MODIFIED":
                out[event.object.name] = out.get(event.object.name, 0) + 1
        return out

    def job_events(self, name: str) -> list[str]:
        events = [e for e in self.store.list(Event, namespace="team") if e.spec.involved_name == name]
        events.sort(key=lambda e: (e.spec.time, int(e.metadata.resource_version or 0)))
        return [e.spec.reason for e in events if e.spec.reason in PHASES]

    def job(self, name: str) -> TrainingJob:
        return self.store.get(TrainingJob, name, "team")

    def pool(self) -> GPUPool:
        return self.store.get(GPUPool, "fixed")


def _shown(job: TrainingJob) -> dict[str, object]:
    """What `gpufleet get` and `describe` show of a job's status."""
    status = job.status
    return {
        "phase": status.phase,
        "replicas": (status.replicas, status.ready_replicas),
        "nodes": status.nodes,
        "times": (status.admitted_time, status.start_time, status.completion_time),
        "conditions": [(c.type, c.status, c.reason, c.last_transition_time) for c in status.conditions],
    }


@pytest.fixture
def worlds(tmp_path: Path) -> tuple[World, World]:
    return World(tmp_path / "held", held=True), World(tmp_path / "at-once", held=False)


def test_a_submitted_job_is_written_once_and_its_events_list_every_transition(
    worlds: tuple[World, World],
) -> None:
    held, at_once = worlds
    before = [world.submit() for world in worlds]
    # Writing at once wrote the first job twice at the instant: queued, then running (its workload's
    # admission and its pods' start reached the controller in one step).
    assert held.writes_since(before[0], "TrainingJob") == {"one": 1, "two": 1}
    assert at_once.writes_since(before[1], "TrainingJob")["one"] == 2
    assert held.job("one").status.phase == "Running" and held.job("two").status.phase == "Pending"
    for name in ("one", "two"):
        assert _shown(held.job(name)) == _shown(at_once.job(name))
        assert held.job_events(name) == at_once.job_events(name)
    assert held.job_events("one") == ["Admitted", "Running"]


def test_a_finished_job_and_the_pool_say_what_writing_at_once_said(worlds: tuple[World, World]) -> None:
    start = worlds[0].clock.now()
    before = []
    for world in worlds:
        world.submit()
        world.runtime.run_until(start + 599)
        before.append(world.store.resource_version)
        world.runtime.run_until(start + 600)  # one finishes; two takes its GPUs at the same instant
    held, at_once = worlds
    assert held.job("one").status.phase == "Succeeded" and held.job("two").status.phase == "Running"
    # The pool's pods went and came back at one instant: its status is what it was, where writing
    # at once wrote it twice.
    assert held.writes_since(before[0], "GPUPool") == {}
    assert at_once.writes_since(before[1], "GPUPool") == {"fixed": 2}
    for world in worlds:
        world.runtime.run_for(1200)
    for name in ("one", "two"):
        assert held.job(name).status.phase == "Succeeded"
        assert _shown(held.job(name)) == _shown(at_once.job(name))
        assert held.job_events(name) == at_once.job_events(name)
    assert held.job_events("one") == ["Admitted", "Running", "Succeeded"]
    pools = [world.pool().status for world in worlds]
    assert pools[0].idle_gpu_hours == pytest.approx(pools[1].idle_gpu_hours)
    assert pools[0].idle_gpu_hours > 0
    assert pools[0].idle_cost == pytest.approx(pools[1].idle_cost)
    assert (pools[0].allocated_gpu_milli, pools[0].idle_gpus) == (0, 16)


def test_a_pool_written_at_most_hourly_keeps_its_idle_hours_exact(tmp_path: Path) -> None:
    """The simulator's pools (`pool_write_seconds`): the store's copy lags, the status does not."""
    hourly = World(tmp_path / "hourly", held=True, pool_write_seconds=3600)
    at_once = World(tmp_path / "at-once", held=False)
    before = []
    for world in (hourly, at_once):
        before.append(world.store.resource_version)
        world.submit()
        world.runtime.run_for(1800)
    writes = [
        w.writes_since(v, "GPUPool").get("fixed", 0) for w, v in zip((hourly, at_once), before, strict=True)
    ]
    assert writes[0] == 0 < writes[1], "written less than hourly, where every change was written"
    held = hourly.pools.held.effective(("", "fixed"), hourly.pool())
    assert held.status.idle_gpu_hours == pytest.approx(at_once.pool().status.idle_gpu_hours)
    assert held.status.allocated_gpu_milli == at_once.pool().status.allocated_gpu_milli
    assert hourly.pool().status.idle_gpu_hours < held.status.idle_gpu_hours, "the stored copy lags"
    version = hourly.store.resource_version
    for world in (hourly, at_once):
        world.runtime.run_for(3600)
    assert hourly.writes_since(version, "GPUPool") == {"fixed": 1}, "an hour later it is written"
    held = hourly.pools.held.effective(("", "fixed"), hourly.pool())
    assert held.status.idle_gpu_hours == pytest.approx(at_once.pool().status.idle_gpu_hours)


def test_a_held_status_that_meets_another_writer_stays_held_and_is_written_on_a_fresh_object(
    tmp_path: Path,
) -> None:
    """In `gpufleet up` the HTTP API may change the job between the controller's look and the
    write: the write is refused, the status kept for the next flush, never lost."""
    store = SqliteStore.open(tmp_path, synchronous="OFF")
    job = store.create(next(o for o in load_objects(JOBS) if isinstance(o, TrainingJob)))
    key = ("team", job.name)
    held: HeldStatuses[TrainingJob, TrainingJobStatus] = HeldStatuses()
    held.hold(key, job.status.model_copy(update={"phase": "Admitted"}))
    store.update(job.model_copy(update={"spec": job.spec.model_copy(update={"replicas": 1})}))
    assert held.flush(store, lambda _: job, unchanged=lambda s, j: s == j.status) == [key]
    assert store.get(TrainingJob, job.name, "team").status.phase == "Pending"
    assert held.effective(key, job).status.phase == "Admitted", "still held"

    def fresh(_: object) -> TrainingJob:
        return store.get(TrainingJob, job.name, "team")

    assert held.flush(store, fresh, unchanged=lambda s, j: s == j.status) == []
    written = fresh(None)
    assert written.status.phase == "Admitted" and written.spec.replicas == 1
    assert held.echo(key, written), "the controller's own write, not looked at again"


class Collector:
    """Deletes each job, and its Workload, in the round its end is written (as the simulator does)."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    def step(self, now: float) -> None:
        for job in self.store.list(TrainingJob, namespace="team"):
            if job.status.phase == "Succeeded":
                self.store.delete(TrainingJob, job.name, "team")
                self.store.delete(Workload, job_workload_name(job.name), "team")


def test_a_finished_job_is_written_before_its_workload_goes_inactive_at_the_same_instant(
    tmp_path: Path,
) -> None:
    """The job's end comes first: whoever collects finished jobs deletes both before the workload's
    change is written; left alone, the workload is inactive and its GPUs free within the instant."""
    kept = World(tmp_path / "kept", held=True)
    collected = World(tmp_path / "collected", held=True)
    collected.runtime.participants.append(Collector(collected.store))
    start = kept.clock.now()
    before = []
    for world in (kept, collected):
        world.submit()
        world.runtime.run_until(start + 599)
        before.append(world.store.resource_version)
        world.runtime.run_until(start + 600)
    assert kept.job("one").status.phase == "Succeeded" and kept.job("two").status.phase == "Running"
    workload = kept.store.get(Workload, job_workload_name("one"), "team")
    assert not workload.spec.active and workload.status.phase == "Inactive"
    order = [
        (e.object.kind, e.object.name)
        for e in kept.store.events_since(before[0], kinds=["TrainingJob", "Workload"])
        if e.object.name in ("one", "job-one")
    ]
    assert order.index(("TrainingJob", "one")) < order.index(("Workload", "job-one"))
    events = collected.store.events_since(before[1], kinds=["Workload"])
    assert [e.type for e in events if e.object.name == "job-one"] == ["DELETED"], "no change first"
    assert collected.job("two").status.phase == "Running", "its GPUs were free at the same instant"
