"""The first pass starts with the first page of pending pods: free capacity only until all are listed."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gpufleet.api import ObjectMeta, Queue, QueueSpec
from gpufleet.api.queue import FlavorQuota
from gpufleet.kube import scheduler_informers
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer
from .fixtures import gang, pod
from .test_scheduler import add_node, add_pods, bound

PODS = "/api/v1/namespaces/team-a/pods"


def hold_second_page(api: FakeApiServer) -> threading.Event:
    """Holds the pod list's second page until the event is set."""
    release = threading.Event()
    request = api.request

    def gated(method: str, path: str, **kw: Any) -> Any:
        if method == "GET" and path == "/api/v1/pods" and (kw.get("query") or {}).get("continue"):
            release.wait(30)
        return request(method, path, **kw)

    api.request = gated  # type: ignore[method-assign]
    return release


def test_pods_listed_so_far_take_free_capacity_and_nobody_is_evicted_until_all_are_listed(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = KubeStore(api)
    store.create(
        Queue(
            metadata=ObjectMeta(name="team-a"), spec=QueueSpec(quotas={"H100-80GB": FlavorQuota(nominal=64)})
        )
    )
    strict = QueueSpec(quotas={"H100-80GB": FlavorQuota(nominal=64)}, queueing_strategy="StrictFIFO")
    store.create(Queue(metadata=ObjectMeta(name="fifo"), spec=strict))
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    add_node(api, "small", gpus=2)
    # A low-priority gang holds one big node before the scheduler starts.
    add_pods(api, gang("low", 2, gpus=4, annotations={}, priority=100))
    first = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    for informer in (first.nodes, first.pods, first.queues, first.jobs):
        informer.relist()
    first.schedule_once()
    held = bound(api)
    assert held["low-0"] == held["low-1"] != "small"
    urgent = {"labels": {"gpufleet.io/queue": "team-a"}, "priority": 10_000}
    add_pods(api, [pod("a", gpus=8, **urgent), pod("b", gpus=8, **urgent),  # type: ignore[arg-type]
                   pod("c", gpus=1, labels={"gpufleet.io/queue": "fifo"})])  # fmt: skip
    add_pods(api, [pod("d", gpus=1, labels={"gpufleet.io/queue": "team-a"})])

    monkeypatch.setattr(scheduler_informers, "POD_PAGE", 3)
    release = hold_second_page(api)
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    stop = threading.Event()
    try:
        sched.informers.start(stop)
        assert sched.informers.wait_until_ready(10)
        for _ in range(100):
            if sched.pods.get("team-a/c") is not None:
                break
            stop.wait(0.05)
        assert not sched.pods.synced and sched.pods.get("team-a/d") is None
        sched.schedule_once()
        # a fits a free node; b would need low's GPUs; c's queue is strict FIFO: an unlisted pod may be
        # its head. Nothing is evicted and no reason is written about a partial picture.
        assert bound(api) == {**held, "a": ({"gpu-1", "gpu-2"} - {held["low-0"]}).pop()}
        low = api.objects["/v1/pods"][("team-a", "low-0")]
        assert not low["metadata"].get("deletionTimestamp")
        b = api.objects["/v1/pods"][("team-a", "b")]
        assert not any(c["type"] == "PodScheduled" for c in b["status"].get("conditions", []))

        release.set()
        assert sched.pods.wait_for_sync(10)
        sched.schedule_once()
        assert bound(api) == {**held, "a": bound(api)["a"], "c": "small", "d": "small"}
        evicted = [api.objects["/v1/pods"][("team-a", f"low-{i}")] for i in range(2)]
        assert all(v["metadata"].get("deletionTimestamp") for v in evicted)  # b's victims, now
    finally:
        release.set()
        stop.set()
