"""The same queues and work give the same Queue status in both worlds (one rule: `queuestatus`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue, QueueSpec
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import Event, Node, NodeSpec, OwnerRef, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import add_node, add_pods, events, run

H100 = "H100-80GB"
NODES = ("gpu-1", "gpu-2")
QUEUES = {"org": (None, 0), "team": ("org", 12), "orphan": ("nonexistent", 8)}
"""name -> (parent, nominal H100 GPUs); `orphan`'s parent does not exist, so it is left out."""
WORK = {"a": ("team", 8), "b": ("team", 4), "c": ("team", 8), "d": ("orphan", 1)}
"""name -> (queue, GPUs of its one pod): 20 GPUs asked of team's 12, so one of a and c waits."""


def queues() -> list[Queue]:
    return [
        Queue(
            metadata=ObjectMeta(name=name),
            spec=QueueSpec(parent=parent, quotas={H100: FlavorQuota(nominal=gpus)}),
        )
        for name, (parent, gpus) in QUEUES.items()
    ]


def said(valid: Any, pending: Any, admitted: Any, usage: Any, warnings: list[Any]) -> dict[str, Any]:
    return {
        "valid": valid,
        "pending": pending,
        "admitted": admitted,
        "usage": dict(usage or {}),
        "warnings": sorted(warnings),
    }


def embedded(path: Path) -> dict[str, dict[str, Any]]:
    store = SqliteStore.open(path, synchronous="OFF", clock=VirtualClock().datetime)
    for name in NODES:
        node = store.create(Node(metadata=ObjectMeta(name=name), spec=NodeSpec(gpu_model=H100, gpus=8)))
        store.update_status(
            node.model_copy(update={"status": node.status.model_copy(update={"phase": "Ready"})})
        )
    for queue in queues():
        store.create(queue)  # behind the API's checks, which would refuse the orphan
    for name, (queue_name, gpus) in WORK.items():
        spec = WorkloadSpec(
            owner=OwnerRef(kind="TrainingJob", name=name),
            queue=queue_name,
            pod_sets=[WorkloadPodSet(count=1, request=PodRequest(gpus=gpus))],
        )
        store.create(Workload(metadata=ObjectMeta(name=name), spec=spec))
    manager = ControllerManager(store, [SchedulingController(store)])
    for _ in range(3):
        manager.step(0.0)
    invalid = [e.spec for e in store.list(Event) if e.spec.reason == "InvalidQueue"]
    out = {}
    for name in QUEUES:
        status = store.get(Queue, name).status
        valid = next(c for c in status.conditions if c.type == "Valid")
        out[name] = said(
            (valid.status, valid.reason, valid.message),
            status.pending_workloads,
            status.admitted_workloads,
            status.usage,
            [(e.type, e.message) for e in invalid if e.involved_name == name],
        )
    store.close()
    return out


def kubernetes() -> dict[str, dict[str, Any]]:
    api = FakeApiServer()
    for queue in queues():
        KubeStore(api).create(queue)  # kubectl skips the API's checks too
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    for name in NODES:
        add_node(api, name)
    add_pods(api, [pod(n, gpus=g, labels={"gpufleet.io/queue": q}) for n, (q, g) in WORK.items()])
    run(sched)
    run(sched)
    out = {}
    for name in QUEUES:
        status = api.request("GET", f"/apis/gpufleet.io/v1alpha1/queues/{name}")["status"]
        valid = next(c for c in status["conditions"] if c["type"] == "Valid")
        out[name] = said(
            (valid["status"], valid["reason"], valid["message"]),
            status.get("pendingWorkloads"),
            status.get("admittedWorkloads"),
            status.get("usage"),
            [
                (e["type"], e["message"])
                for e in events(api, "InvalidQueue")
                if e["involvedObject"]["name"] == name
            ],
        )
    return out


def test_both_worlds_write_the_same_queue_status(tmp_path: Path) -> None:
    ok = ("True", "InQuotaTree", "")
    left_out = ("False", "InvalidParent", "left out of the quota tree: unknown parent queue 'nonexistent'")
    expected = {
        "org": said(ok, 1, 2, {H100: 12}, []),
        "team": said(ok, 1, 2, {H100: 12}, []),
        # One Warning, however many passes ran, saying what the condition says.
        "orphan": said(left_out, 1, 0, {}, [("Warning", left_out[2])]),
    }
    assert embedded(tmp_path) == expected
    assert kubernetes() == expected
