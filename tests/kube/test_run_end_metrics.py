"""`gpufleet_evictions_total` for the runs of plain Pods, gangs and InferenceService replicas that a drain,
a lost node or a failed GPU ends (`kube.runends`): counted once a run by the scheduler, in the shared
words (`api.evictions`); the scheduler's own preemptions, quiet ends and TrainingJobs' attempts not."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from gpufleet.api import evictions
from gpufleet.kube.config import INTERRUPTION_ANNOTATION
from gpufleet.kube.disruptions import run_end_reason
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from . import test_operator
from .fakeapi import FakeApiServer
from .fixtures import gang, node, pod
from .test_fleet import annotate
from .test_fleet import sync as sync_nodes
from .test_operator import Clock, make_job, set_phase
from .test_operator import sync as sync_jobs
from .test_scheduler import NODES, PODS, add_pods, add_queues, bound, run

world = test_operator.world
__all__ = ["world"]  # the operator's and the scheduler's fixture

MERGE = "application/merge-patch+json"
QUEUE = {"gpufleet.io/queue": "team-a"}


def counted(reason: str, queue: str = "team-a") -> float:
    return REGISTRY.get_sample_value("gpufleet_evictions_total", {"queue": queue, "reason": reason}) or 0.0


def all_counted(queue: str = "team-a") -> float:
    return sum(
        s.value
        for metric in REGISTRY.collect()
        if metric.name == "gpufleet_evictions"
        for s in metric.samples
        if s.name == "gpufleet_evictions_total" and s.labels["queue"] == queue
    )


def passes(sched: KubeScheduler, n: int = 3) -> None:
    for _ in range(n):
        run(sched)


def running(api: FakeApiServer, sched: KubeScheduler, pods: list[dict]) -> dict[str, str]:
    add_pods(api, pods)
    run(sched)
    where = bound(api)
    for p in pods:
        set_phase(api, p["metadata"]["name"], "Running")
    passes(sched, 1)
    return where


def fail_gpu(api: FakeApiServer, name: str) -> None:
    """The device plugin reports one GPU fewer allocatable: the agent found it broken."""
    status = {
        "status": {
            "allocatable": {**api.get(f"{NODES}/{name}")["status"]["allocatable"], "nvidia.com/gpu": "7"}
        }
    }
    api.request("PATCH", f"{NODES}/{name}/status", body=status, content_type=MERGE)


def test_a_gpu_health_drain_ends_a_plain_pods_run_once_as_node_unhealthy(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    where = running(api, sched, [pod("plain", gpus=8, labels=QUEUE)])
    before = counted(evictions.NODE_UNHEALTHY)
    fail_gpu(api, where["plain"])
    sync_nodes(op)  # the operator cordons the node and evicts its pods (reason GPUUnhealthy)
    assert api.get(f"{PODS}/plain")["metadata"].get("deletionTimestamp")
    passes(sched)
    assert counted(evictions.NODE_UNHEALTHY) == before + 1
    api.request("DELETE", f"{PODS}/plain", body={"gracePeriodSeconds": 0})  # the kubelet is done
    passes(sched)
    assert counted(evictions.NODE_UNHEALTHY) == before + 1


def test_a_lost_node_ends_a_gangs_run_once_as_node_lost(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    _, sched, _ = world
    where = running(api, sched, gang("lost", 2, gpus=4))
    assert where["lost-0"] == where["lost-1"]  # one node: packed
    before = counted(evictions.NODE_LOST)
    # Kubernetes' node lifecycle controller taints the unreachable node; its taint manager then
    # marks each pod and deletes it.
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
    api.request("PATCH", f"{NODES}/{where['lost-0']}", body={"spec": {"taints": [taint]}}, content_type=MERGE)
    for name in ("lost-0", "lost-1"):
        target = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
        body = {"status": {"conditions": [target]}}
        api.request("PATCH", f"{PODS}/{name}/status", body=body, content_type=MERGE)
        api.request("DELETE", f"{PODS}/{name}", body={"gracePeriodSeconds": 0})
    passes(sched)
    assert counted(evictions.NODE_LOST) == before + 1


def test_a_failed_gpu_ends_a_gangs_run_once_as_gpu_failure(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    _, sched, _ = world
    where = running(api, sched, gang("xid", 2, gpus=4))
    before = counted(evictions.GPU_FAILURE)
    fail_gpu(api, where["xid-0"])
    set_phase(api, "xid-0", "Failed")  # its program crashed on the GPU; the other member follows later
    passes(sched)
    assert counted(evictions.GPU_FAILURE) == before + 1
    set_phase(api, "xid-1", "Failed")
    passes(sched)
    assert counted(evictions.GPU_FAILURE) == before + 1


def test_a_spot_drain_ends_an_inference_replicas_run_as_spot_interruption(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    add_queues(api, "serving")
    replica = pod("chat-0", gpus=1, labels={"gpufleet.io/queue": "serving"})
    replica["metadata"]["ownerReferences"] = [
        {"apiVersion": "gpufleet.io/v1alpha1", "kind": "InferenceService", "name": "chat", "uid": "u-chat",
         "controller": True}
    ]  # fmt: skip
    where = running(api, sched, [replica])
    before = counted(evictions.SPOT_INTERRUPTION, "serving")
    annotate(api, where["chat-0"], INTERRUPTION_ANNOTATION, "2026-11-29T12:02:00Z")
    sync_nodes(op)
    passes(sched)
    assert counted(evictions.SPOT_INTERRUPTION, "serving") == before + 1


def test_quiet_ends_and_the_schedulers_own_preemptions_are_not_counted_here(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    _, sched, _ = world
    running(api, sched, [pod(n, gpus=2, labels=QUEUE) for n in ("done", "crashed", "deleted")])
    before = all_counted()
    set_phase(api, "done", "Succeeded")
    set_phase(api, "crashed", "Failed")  # its own program failed, on a healthy node
    api.request("DELETE", f"{PODS}/deleted", body={"gracePeriodSeconds": 0})  # someone deleted it
    passes(sched)
    assert all_counted() == before
    # A preemption by this scheduler is counted once, where it is decided.
    running(api, sched, [pod(f"low-{i}", gpus=8, priority=1, labels=QUEUE) for i in range(4)])  # all GPUs
    before, preempted = all_counted(), counted(evictions.PREEMPTED)
    add_pods(api, [pod("urgent", gpus=8, priority=10_000, labels=QUEUE, created="2026-11-29T11:30:00Z")])
    passes(sched)
    assert counted(evictions.PREEMPTED) == preempted + 1
    assert all_counted() == before + 1  # and nothing else for the victim's end


def test_a_training_jobs_drained_attempt_is_the_operators_to_count(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    make_job(api, replicas=2)
    sync_jobs(op)
    run(sched)
    for i in range(2):
        set_phase(api, f"llm-0-{i}", "Running")
    sync_jobs(op)
    before = all_counted()
    fail_gpu(api, bound(api)["llm-0-0"])
    sync_nodes(op)
    passes(sched)
    sync_jobs(op)
    passes(sched)
    assert all_counted() == before + 1  # the operator's one restart; the scheduler counts nothing


@pytest.mark.parametrize(
    ("pod_status", "node_state", "reason"),
    [
        ({"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "GPUUnhealthy"}]}, "ok",
         evictions.NODE_UNHEALTHY),
        ({"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}]}, "ok",
         evictions.NODE_LOST),
        ({"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]},
         "not-ready", evictions.NODE_NOT_READY),
        ({"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]},
         "ok", "EvictionByEvictionAPI"),  # a kubectl drain: Kubernetes' own word
        ({"phase": "Running"}, "gone", evictions.NODE_LOST),
        ({"phase": "Failed", "reason": "NodeLost"}, "ok", evictions.NODE_LOST),
        ({"phase": "Failed"}, "gpu-failed", evictions.GPU_FAILURE),
        ({"phase": "Failed", "reason": "Evicted"}, "ok", "Evicted"),  # the kubelet's node pressure
        ({"phase": "Failed"}, "ok", None),
        ({"phase": "Succeeded"}, "ok", None),
        ({"phase": "Running"}, "ok", None),  # deleted by someone
    ],
)  # fmt: skip
def test_why_a_pod_stopped_in_the_shared_words(pod_status: dict, node_state: str, reason: str | None) -> None:
    stopped = pod("p", node_name="n1", phase="Running")
    stopped["status"].update(pod_status)
    where = (
        None
        if node_state == "gone"
        else node("n1", allocatable_gpus=7 if node_state == "gpu-failed" else None)
    )
    if node_state == "not-ready":
        assert where is not None
        where["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    assert run_end_reason(stopped, where) == reason


def test_a_training_job_worker_failed_on_a_broken_gpu_restarts_it_as_gpu_failure(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    make_job(api, replicas=2)
    sync_jobs(op)
    run(sched)
    for i in range(2):
        set_phase(api, f"llm-0-{i}", "Running")
    sync_jobs(op)
    before = counted(evictions.GPU_FAILURE)
    fail_gpu(api, bound(api)["llm-0-0"])
    set_phase(api, "llm-0-0", "Failed", message="CUDA error: an illegal memory access")
    op.nodes.relist()  # the operator sees the node's GPU gone before it drains it
    sync_jobs(op)
    passes(sched)
    assert counted(evictions.GPU_FAILURE) == before + 1  # the operator's count; the scheduler's none
    [restart] = [e["message"] for e in api.objects["/v1/events"].values() if e["reason"] == "Restarting"]
    assert "after llm-0-0 GPUFailure: CUDA error" in restart, restart
