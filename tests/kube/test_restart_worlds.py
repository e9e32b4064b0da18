"""The restart rule in both worlds (docs/scheduling.md decision 24): the same TrainingJob and the same
disruption history, run through the embedded control plane (its scheduling and TrainingJob
controllers over SQLite) and through the Kubernetes operator (over the in-memory API server), come to
the same restart count, the same time the next attempt starts, and the same decision to give up."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pytest

from gpufleet.api.labels import JOB_LABEL, job_workload_name
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Node, NodeSpec, Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.api.training import TrainingJob
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.controllers.training import TrainingJobController
from gpufleet.kube.operator import Operator
from gpufleet.kube.status import stamp
from gpufleet.kube.store import KubeStore
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .fakeapi import FakeApiServer
from .test_lost_work import bind
from .test_operator import NOW, Clock, job_status, pods, set_phase, sync
from .test_scheduler import PODS

MERGE = "application/merge-patch+json"


def training_job(*, max_restarts: int, backoff: float) -> TrainingJob:
    """Two 8-GPU workers; the one object both worlds are given."""
    return TrainingJob.model_validate(
        {
            "metadata": {"name": "llm", "namespace": "team-a"},
            "spec": {
                "replicas": 2,
                "worker": {
                    "gpus": 8,
                    "template": {"spec": {"containers": [{"name": "train", "image": "trainer:1"}]}},
                },
                "restartPolicy": {"maxRestarts": max_restarts, "backoffSeconds": backoff},
            },
        }
    )


class World(Protocol):
    def started(self, now: float) -> bool:
        """Looks at the job at `now`; True once a new attempt holds its workers (then they run)."""

    def fail_worker(self, now: float) -> None:
        """A worker of the running attempt fails at `now` (NCCL timeout), and the world reacts."""

    def outcome(self) -> tuple[int, str]:
        """The job's `status.restarts` and phase."""


class Embedded:
    def __init__(self, tmp_path: Path, job: TrainingJob) -> None:
        self.store = SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)
        for name in ("n1", "n2"):
            node = self.store.create(
                Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100", gpus=8))
            )
            ready = node.status.model_copy(update={"phase": "Ready"})
            self.store.update_status(node.model_copy(update={"status": ready}))
        self.store.create(job)
        self.manager = ControllerManager(
            self.store, [SchedulingController(self.store), TrainingJobController(self.store)]
        )
        self.attempt = 0

    def _step(self, now: float) -> None:
        for _ in range(3):
            self.manager.step(now)

    def _workers(self) -> list[Pod]:
        workload = self.store.get(WorkloadObject, job_workload_name("llm"), "team-a")
        return [
            p
            for p in self.store.list(Pod, namespace="team-a", label_selector={JOB_LABEL: "llm"})
            if p.spec.attempt == workload.status.attempts
        ]

    def started(self, now: float) -> bool:
        self._step(now)
        workload = self.store.get(WorkloadObject, job_workload_name("llm"), "team-a")
        if workload.status.phase != "Admitted" or workload.status.attempts == self.attempt:
            return False
        self.attempt = workload.status.attempts
        for pod in self._workers():
            running = {"phase": "Running", "start_time": datetime.fromtimestamp(now, UTC)}
            self.store.update_status(pod.model_copy(update={"status": pod.status.model_copy(update=running)}))
        self._step(now)
        return True

    def fail_worker(self, now: float) -> None:
        pod = self._workers()[0]
        failed = {"phase": "Failed", "reason": "Error", "message": "NCCL timeout"}
        self.store.update_status(pod.model_copy(update={"status": pod.status.model_copy(update=failed)}))
        self._step(now)

    def outcome(self) -> tuple[int, str]:
        job = self.store.get(TrainingJob, "llm", "team-a")
        return job.status.restarts, job.status.phase


class Kubernetes:
    def __init__(self, api: FakeApiServer, job: TrainingJob) -> None:
        self.api = api
        self.clock = Clock()
        self.op = Operator(api, clock=self.clock, nodes=False)
        KubeStore(api).create(job)

    def _attempt(self) -> int:
        return int(job_status(self.api).get("restarts", 0))

    def started(self, now: float) -> bool:
        self.clock.now = now
        sync(self.op)
        names = [f"llm-{self._attempt()}-{rank}" for rank in range(2)]
        live = {n for n, p in pods(self.api).items() if not p["metadata"].get("deletionTimestamp")}
        if not set(names) <= live or pods(self.api)[names[0]]["spec"].get("nodeName"):
            return False
        for rank, name in enumerate(names):  # what the scheduler and the kubelets do
            bind(self.api, name, f"gpu-{rank}")
            body = {"status": {"phase": "Running", "startTime": stamp(now)}}
            self.api.request("PATCH", f"{PODS}/{name}/status", body=body, content_type=MERGE)
        sync(self.op)
        return True

    def fail_worker(self, now: float) -> None:
        self.clock.now = now
        set_phase(self.api, f"llm-{self._attempt()}-0", "Failed", reason="Error", message="NCCL timeout")
        sync(self.op)

    def outcome(self) -> tuple[int, str]:
        status = job_status(self.api)
        return int(status.get("restarts", 0)), str(status["phase"])


Step = tuple[int, float | None, bool]
"""After a disruption: restarts, when the next attempt started (None: none did), whether it gave up."""


def run(world: World, *, disruptions: int, backoff: float) -> list[Step]:
    """The job starts, then each attempt runs 100 s and a worker fails; after each failure the job is
    looked at every second until its next attempt starts (or it gave up)."""
    now = NOW
    assert world.started(now)
    steps: list[Step] = []
    for _ in range(disruptions):
        now += 100
        world.fail_worker(now)
        restarts, phase = world.outcome()
        if phase == "Failed":
            steps.append((restarts, None, True))
            break
        started = None
        for second in range(int(backoff) + 2):
            if world.started(now + second):
                started = now + second
                break
        steps.append((restarts, started, False))
        if started is None:
            break
        now = started
    return steps


@pytest.mark.parametrize(
    ("max_restarts", "backoff", "disruptions", "expected"),
    [
        # Within the limit: each restart after the backoff, counted from the disruption.
        (3, 30, 2, [(1, NOW + 100 + 30, False), (2, NOW + 130 + 100 + 30, False)]),
        # The disruption past maxRestarts gives up, and is counted.
        (1, 30, 3, [(1, NOW + 130, False), (2, None, True)]),
        # No restart allowed at all.
        (0, 30, 1, [(1, None, True)]),
        # No backoff: the next attempt starts at once.
        (2, 0, 2, [(1, NOW + 100, False), (2, NOW + 200, False)]),
    ],
)
def test_both_worlds_restart_at_the_same_time_and_give_up_at_the_same_count(
    tmp_path: Path,
    api: FakeApiServer,
    max_restarts: int,
    backoff: float,
    disruptions: int,
    expected: list[Step],
) -> None:
    job = training_job(max_restarts=max_restarts, backoff=backoff)
    embedded = run(Embedded(tmp_path, job), disruptions=disruptions, backoff=backoff)
    kubernetes = run(Kubernetes(api, job), disruptions=disruptions, backoff=backoff)
    assert embedded == kubernetes == expected


def lower_limit(store: KubeStore | SqliteStore) -> None:
    job = store.get(TrainingJob, "llm", "team-a")
    policy = job.spec.restart_policy.model_copy(update={"max_restarts": 0})
    store.update(job.model_copy(update={"spec": job.spec.model_copy(update={"restart_policy": policy})}))


def test_a_limit_lowered_during_the_backoff_gives_up_in_both_worlds(
    tmp_path: Path, api: FakeApiServer
) -> None:
    job = training_job(max_restarts=3, backoff=30)
    embedded, kubernetes = Embedded(tmp_path, job), Kubernetes(api, job)
    outcomes = []
    for world, store in ((embedded, embedded.store), (kubernetes, KubeStore(api))):
        assert world.started(NOW)
        world.fail_worker(NOW + 100)
        assert world.outcome() == (1, "Pending")
        lower_limit(store)
        assert not world.started(NOW + 110)
        outcomes.append(world.outcome())
    assert outcomes == [(1, "Failed"), (1, "Failed")]
