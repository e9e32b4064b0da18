"""The TrainingJob controller looks at a job again when someone else changes its Workload, and not for
the event of its own write: that reconcile would find what the one that wrote it found (a fifth of a
simulation's job reconciles were such echoes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.api.meta import PendingReason
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob
from gpufleet.controllers.manager import ControllerManager, Key
from gpufleet.controllers.training import TrainingJobController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: first, namespace: ml}
spec: {replicas: 2, worker: {gpus: 8}, durationSeconds: 3600}
"""


class Looking(TrainingJobController):
    """Keeps the jobs it reconciled, in order."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store, export_metrics=False)
        self.looked: list[Key] = []

    def reconcile(self, key: Key, now: float) -> float | None:
        self.looked.append(key)
        return super().reconcile(key, now)


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)


def test_its_own_workload_write_is_not_looked_at_again_but_another_writer_s_is(store: SqliteStore) -> None:
    controller = Looking(store)
    manager = ControllerManager(store, [controller])
    store.apply(load_objects(JOB)[0])
    manager.step(0.0)
    workload = store.get(WorkloadObject, "job-first", "ml")  # made by the reconcile of the new job
    assert controller.looked == [("ml", "first")]
    for _ in range(3):
        manager.step(0.0)
    assert controller.looked == [("ml", "first")]

    # The scheduler says why the workload waits: the job's status must say it too.
    why = PendingReason(type="QuotaExceeded", message="queue ml is full")
    status = workload.status.model_copy(update={"pending_reason": why})
    store.update_status(workload.model_copy(update={"status": status}))
    for _ in range(3):
        manager.step(1.0)
    assert controller.looked == [("ml", "first"), ("ml", "first")]
    job = store.get(TrainingJob, "first", "ml")
    assert job.status.pending_reason is not None and job.status.pending_reason.type == "QuotaExceeded"
