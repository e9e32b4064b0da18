"""Lost work in the Kubernetes world: a TrainingJob's disrupted attempts add to `lostGpuSeconds`, by the
same rule (and so the same number) as the embedded world's eviction record."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.api import ObjectMeta
from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import Node, NodeSpec, OwnerRef, Pod, WorkloadPodSet, WorkloadSpec
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.kube.operator import Operator
from gpufleet.kube.pods import seconds
from gpufleet.kube.status import stamp
from gpufleet.kube.store import KubeStore
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .fakeapi import NOW as BOUND_AT
from .fakeapi import FakeApiServer
from .test_operator import NOW, Clock, job_status, make_job, pods, set_phase, sync
from .test_scheduler import PODS

MERGE = "application/merge-patch+json"


def bind(api: FakeApiServer, name: str, node: str) -> None:
    """What the scheduler does: a Binding (the API server marks the pod PodScheduled then)."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": "team-a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    api.request("POST", f"{PODS}/{name}/binding", body=body)


def run_attempt(api: FakeApiServer, attempt: int, *, started: float | None) -> None:
    """The attempt's workers bound and, with `started`, reported running by their kubelets then."""
    for rank in range(2):
        name = f"llm-{attempt}-{rank}"
        bind(api, name, f"gpu-{rank}")
        if started is not None:
            body = {"status": {"phase": "Running", "startTime": stamp(started)}}
            api.request("PATCH", f"{PODS}/{name}/status", body=body, content_type=MERGE)


def evict(api: FakeApiServer, name: str) -> None:
    """The scheduler's preemption: the Eviction API (the pod stays, terminating, without a kubelet)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "team-a"}}
    api.request("POST", f"{PODS}/{name}/eviction", body=body)


def checkpoint(api: FakeApiServer, step: int, at: float) -> None:
    store = KubeStore(api)
    created = store.create(
        Checkpoint(
            metadata=ObjectMeta(name=f"llm-{step}", namespace="team-a"),
            spec=CheckpointSpec(
                job="llm", step=step, uri=f"s3://ckpt/llm/{step}", time=datetime.fromtimestamp(at, UTC)
            ),
        )
    )
    store.update_status(
        created.model_copy(update={"status": created.status.model_copy(update={"phase": "Complete"})})
    )


def restarting_messages(api: FakeApiServer) -> list[str]:
    return [e["message"] for e in api.objects.get("/v1/events", {}).values() if e["reason"] == "Restarting"]


def test_a_preempted_training_job_reports_the_work_it_lost_attempt_after_attempt(api: FakeApiServer) -> None:
    clock = Clock()
    op = Operator(api, clock=clock, nodes=False)
    make_job(api)  # 2 workers of 8 GPUs, backoff 30 s
    sync(op)
    run_attempt(api, 0, started=NOW)
    checkpoint(api, 100, NOW + 10)
    clock.now = NOW + 40
    evict(api, "llm-0-1")
    sync(op)
    status = job_status(api)
    assert status["restarts"] == 1 and status["lostGpuSeconds"] == 16 * 30  # since the checkpoint
    assert "480 GPU-seconds lost so far" in restarting_messages(api)[-1]
    clock.now += 31  # past the backoff: attempt 1 resumes from the checkpoint at NOW + 10
    sync(op)
    run_attempt(api, 1, started=clock.now)
    clock.now += 20
    evict(api, "llm-1-0")
    sync(op)
    # The checkpoint predates attempt 1: all 20 s of it are lost, added to attempt 0's.
    assert job_status(api)["lostGpuSeconds"] == 16 * 30 + 16 * 20


def test_workers_no_kubelet_reported_started_count_from_their_binding(api: FakeApiServer) -> None:
    clock = Clock()
    bound_at = seconds(BOUND_AT)
    assert bound_at is not None
    clock.now = bound_at - 1
    op = Operator(api, clock=clock, nodes=False)
    make_job(api)
    sync(op)
    run_attempt(api, 0, started=None)
    clock.now = bound_at + 5
    evict(api, "llm-0-0")
    sync(op)
    assert job_status(api)["lostGpuSeconds"] == 16 * 5


# ------------------------------------------------------------------ both worlds, one eviction
ADMITTED, STARTED, FAILED = NOW - 5, NOW, NOW + 40


def embedded_record(tmp_path: Path, saved_at: float | None) -> float:
    """The embedded world: a 2 x 8-GPU gang admitted, started, checkpointed, one worker failing."""
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=VirtualClock().datetime)
    for name in ("n1", "n2"):
        node = store.create(Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model="H100", gpus=8)))
        store.update_status(
            node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})})
        )
    spec = WorkloadSpec(
        owner=OwnerRef(kind="TrainingJob", name="llm"),
        pod_sets=[WorkloadPodSet(count=2, request=PodRequest(gpus=8))],
    )
    store.create(WorkloadObject(metadata=ObjectMeta(name="llm"), spec=spec))
    manager = ControllerManager(store, [SchedulingController(store)])

    def step(now: float) -> None:
        for _ in range(3):
            manager.step(now)

    step(ADMITTED)
    for pod in store.list(Pod):
        running = {"phase": "Running", "start_time": datetime.fromtimestamp(STARTED, UTC)}
        store.update_status(pod.model_copy(update={"status": pod.status.model_copy(update=running)}))
    if saved_at is not None:
        wl = store.get(WorkloadObject, "llm")
        saved = datetime.fromtimestamp(saved_at, UTC)
        store.update(
            wl.model_copy(update={"spec": wl.spec.model_copy(update={"last_checkpoint_time": saved})})
        )
    step(STARTED)
    pod = store.list(Pod).items[0]
    failed = {"phase": "Failed", "reason": "Error", "message": "NCCL timeout"}
    store.update_status(pod.model_copy(update={"status": pod.status.model_copy(update=failed)}))
    step(FAILED)
    (eviction,) = store.get(WorkloadObject, "llm").status.evictions
    return eviction.lost_gpu_seconds


def kube_status(api: FakeApiServer, saved_at: float | None) -> float:
    """The Kubernetes world: the same gang, checkpoint and failing worker through the operator."""
    clock = Clock()
    clock.now = ADMITTED
    op = Operator(api, clock=clock, nodes=False)
    make_job(api)
    sync(op)
    run_attempt(api, 0, started=STARTED)
    if saved_at is not None:
        checkpoint(api, 100, saved_at)
    clock.now = FAILED
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    sync(op)
    assert not [p for p in pods(api).values() if not p["metadata"].get("deletionTimestamp")]
    return float(job_status(api)["lostGpuSeconds"])


@pytest.mark.parametrize(
    ("saved_at", "lost"),
    [
        (None, 16 * 40),  # no checkpoint: since the workers started
        (STARTED + 15, 16 * 25),  # a checkpoint during the attempt
        (STARTED - 100, 16 * 40),  # the checkpoint it resumed from saved nothing of this attempt
    ],
)
def test_both_worlds_record_the_same_lost_work_for_the_same_eviction(
    tmp_path: Path, api: FakeApiServer, saved_at: float | None, lost: float
) -> None:
    assert embedded_record(tmp_path, saved_at) == kube_status(api, saved_at) == lost
