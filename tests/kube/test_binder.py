"""Binding off the scheduling thread: one request per pod, outcomes handed back, failures retried."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.transport import ApiError

from .fakeapi import FakeApiServer
from .test_scheduler import add_node, add_pods, add_queues, bound, events, pod, run


def _sched(api: FakeApiServer, workers: int) -> KubeScheduler:
    add_queues(api, "default", "team-a")
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=workers)


def _settle(sched: KubeScheduler, api: FakeApiServer, want: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(bound(api)) < want or sched.binder.busy:
        assert time.monotonic() < deadline, f"{len(bound(api))} of {want} bound"
        time.sleep(0.01)
    run(sched)


def test_one_request_binds_a_pod_with_its_gpus_and_flavor(api: FakeApiServer) -> None:
    sched = _sched(api, 0)
    add_node(api, "gpu-1")
    add_pods(api, [pod("p", gpus=2)])
    api.requests.clear()
    run(sched)
    writes = [(m, p) for m, p in api.requests if m in ("POST", "PATCH", "PUT") and "/pods" in p]
    assert writes == [("POST", "/api/v1/namespaces/team-a/pods/p/binding")]
    annotations = api.objects["/v1/pods"][("team-a", "p")]["metadata"]["annotations"]
    assert len(json.loads(annotations["gpufleet.io/gpus"])["gpus"]) == 2
    assert annotations["gpufleet.io/flavor"] == "H100-80GB"
    scheduled = events(api, "Scheduled")
    assert [e["message"] for e in scheduled] == ["Successfully assigned team-a/p to gpu-1"]
    assert scheduled[0]["type"] == "Normal" and sched.stats.bound == 1


class _SlowBinds:
    """Holds every binding until released, so the scheduling thread is seen not to wait for them."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        self.release = threading.Event()
        self.held = 0
        self.lock = threading.Lock()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if path.endswith("/binding"):
            with self.lock:
                self.held += 1
            assert self.release.wait(10)
        return self.api.request(method, path, **kwargs)

    def watch(self, path: str, **kwargs: Any) -> Any:
        return self.api.watch(path, **kwargs)


def test_the_scheduling_pass_does_not_wait_for_binds(api: FakeApiServer) -> None:
    slow = _SlowBinds(api)
    add_queues(api, "default", "team-a")
    sched = KubeScheduler(slow, clock=lambda: 1_900_000_000.0, bind_workers=4)  # type: ignore[arg-type]
    for i in range(2):
        add_node(api, f"gpu-{i}")
    add_pods(api, [pod(f"p{i}", gpus=1) for i in range(12)])
    run(sched)  # returns with every bind still held
    assert bound(api) == {} and sched.binder.busy == 12
    deadline = time.monotonic() + 5
    while slow.held < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    # No more in flight than the pool allows: four workers, each held in its bind, and no fifth to
    # take another (its threads counted rather than a pause that a fifth bind might outlast).
    workers = sched.binder._threads
    assert slow.held == 4 and len(workers) == 4 and all(t.is_alive() for t in workers)
    run(sched)  # a pass meanwhile counts the pods assumed, so nothing is bound twice
    slow.release.set()
    _settle(sched, api, 12)
    assert len(bound(api)) == 12 and sched.stats.bound == 12
    sched.binder.close()


class _FailingBinds:
    """Refuses the first `n` bindings as an unreachable server would."""

    def __init__(self, api: FakeApiServer, n: int) -> None:
        self.api = api
        self.left = n

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if path.endswith("/binding") and self.left > 0:
            self.left -= 1
            raise ApiError(0, "Unavailable", "connection refused")
        return self.api.request(method, path, **kwargs)

    def watch(self, path: str, **kwargs: Any) -> Any:
        return self.api.watch(path, **kwargs)


def test_a_bind_that_failed_is_retried_on_the_same_node(api: FakeApiServer) -> None:
    failing = _FailingBinds(api, 1)
    add_queues(api, "default", "team-a")
    sched = KubeScheduler(failing, clock=lambda: 1_900_000_000.0, bind_workers=0)  # type: ignore[arg-type]
    add_node(api, "gpu-1")
    add_pods(api, [pod("p", gpus=8)])
    run(sched)
    assert bound(api) == {} and "team-a/p" in sched.retry_binds
    run(sched)
    assert bound(api) == {"p": "gpu-1"} and not sched.retry_binds


def test_a_bind_refused_for_good_drops_the_assumption(api: FakeApiServer) -> None:
    sched = _sched(api, 0)
    add_node(api, "gpu-1")
    add_pods(api, [pod("p", gpus=8)])
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    api.request("DELETE", "/api/v1/namespaces/team-a/pods/p", body={"gracePeriodSeconds": 0})
    sched.schedule_once()  # decides on the informer's stale copy; the Binding gets 404
    assert "team-a/p" not in sched.kcache.assumed


def test_the_informer_catching_up_with_a_bind_keeps_the_pod_where_it_was_assumed(api: FakeApiServer) -> None:
    sched = _sched(api, 0)
    add_node(api, "gpu-1")
    add_pods(api, [pod("a", gpus=3)])
    run(sched)
    fleet = sched.kcache.cache.fleet  # type: ignore[union-attr]
    held = {name: (a.node, a.gpus) for name, a in fleet.allocations.items()}
    assert "team-a/a" in sched.kcache.assumed
    run(sched)  # the informer now shows the binding
    assert not sched.kcache.assumed
    assert {name: (a.node, a.gpus) for name, a in fleet.allocations.items()} == held
    group = sched.kcache.groups["team-a/a"]
    assert group.members[0]["spec"]["nodeName"] == "gpu-1"  # the group holds the bound copy
    add_pods(api, [pod("b", gpus=5)])
    run(sched)
    run(sched)
    assert bound(api) == {"a": "gpu-1", "b": "gpu-1"}
    gpus = [set(a.gpus) for a in fleet.allocations.values()]
    assert len(gpus) == 2 and not gpus[0] & gpus[1]  # never the same GPU twice


def test_a_pod_changed_while_it_was_bound_is_accounted_again(api: FakeApiServer) -> None:
    sched = _sched(api, 0)
    add_node(api, "gpu-1")
    add_pods(api, [pod("a", gpus=2)])
    run(sched)
    patch = {"metadata": {"labels": {"gpufleet.io/priority-class": "research"}}}
    api.request(
        "PATCH", "/api/v1/namespaces/team-a/pods/a", body=patch, content_type="application/merge-patch+json"
    )
    run(sched)
    workload = sched.kcache.cache.admitted["team-a/a"].workload  # type: ignore[union-attr]
    assert workload.priority == 1000  # read from the pod as it is now, not kept from before


def test_a_bind_that_keeps_failing_is_retried_with_a_growing_delay(api: FakeApiServer) -> None:
    failing = _FailingBinds(api, 3)
    add_queues(api, "default", "team-a")
    sched = KubeScheduler(failing, clock=lambda: 1_900_000_000.0, bind_workers=0)  # type: ignore[arg-type]
    add_node(api, "gpu-1")
    add_pods(api, [pod("p", gpus=8)])
    run(sched)  # first failure: tried again at once
    assert sched.retry_binds["team-a/p"].delay == 0.0
    run(sched)  # second: after half a second
    assert sched.retry_binds["team-a/p"].delay == 0.5
    run(sched)  # not due yet: not sent
    assert failing.left == 1 and bound(api) == {}
    due = sched.retry_binds["team-a/p"].due
    while time.monotonic() < due:
        time.sleep(0.05)
    run(sched)  # third failure
    assert sched.retry_binds["team-a/p"].delay == 1.0 and failing.left == 0
