"""A bug the Kubernetes scheduler meets on one workload or node stops no pass: the other pods are bound,
the workload's pods say why they wait, what its bound pods hold stays held, and it is accounted again
when its pods change."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube import cache as kube_cache
from gpufleet.kube import nodes as kube_nodes
from gpufleet.kube.scheduler import KubeScheduler

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import PODS, add_node, add_pods, add_queues, bound, condition, run

pytestmark = pytest.mark.contained_failures


def make(api: FakeApiServer) -> KubeScheduler:
    add_queues(api, "default", "team-a")
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


def _buggy_on(monkeypatch: pytest.MonkeyPatch, name: str) -> dict[str, bool]:
    """Makes deriving the workload of pod `name` raise an error no check foresaw, until turned off."""
    real = kube_cache.kube_pods.workload
    bug = {"on": True}

    def workload(group: Any, *args: Any, **kwargs: Any) -> Any:
        if bug["on"] and any(p["metadata"]["name"] == name for p in group.members):
            raise ZeroDivisionError("a bug its numbers trip")
        return real(group, *args, **kwargs)

    monkeypatch.setattr(kube_cache.kube_pods, "workload", workload)
    return bug


def test_a_pod_the_scheduler_fails_on_waits_alone_and_is_tried_when_it_changes(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    bug = _buggy_on(monkeypatch, "bad")
    add_pods(api, [pod("a", gpus=2), pod("bad", gpus=2), pod("z", gpus=2)])
    run(sched)
    assert set(bound(api)) == {"a", "z"}
    assert sched.stats.errors == 0 and sched.kcache.failures == 1
    run(sched)  # its pod changed once more: the scheduler wrote why it waits
    failed = sched.kcache.failures
    run(sched)
    assert failed == 2 and sched.kcache.failures == failed  # not tried while its pod is unchanged
    bug["on"] = False
    patch = {"metadata": {"labels": {"touched": "yes"}}}
    api.request("PATCH", f"{PODS}/bad", body=patch, content_type="application/merge-patch+json")
    run(sched)
    assert set(bound(api)) == {"a", "bad", "z"}


def test_the_reason_is_on_the_pods_when_the_group_was_made(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    _buggy_on(monkeypatch, "bad")
    add_pods(api, [pod("bad", gpus=2)])
    run(sched)
    scheduled = condition(api, "bad", "PodScheduled")
    assert scheduled is not None and scheduled["status"] == "False"
    assert "SchedulingError" in scheduled["message"] and "ZeroDivisionError" in scheduled["message"]


def test_a_bound_pod_the_scheduler_fails_on_keeps_its_gpus(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    _buggy_on(monkeypatch, "running")
    add_pods(api, [pod("running", gpus=8, node_name="gpu-1", phase="Running"), pod("next", gpus=8)])
    run(sched)
    run(sched)
    assert bound(api) == {"running": "gpu-1"}  # nothing was placed on its GPUs
    assert sched.kcache.failures == 1


def test_a_node_the_scheduler_fails_on_is_left_out_and_the_others_serve(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    real = kube_nodes.node_spec

    def node_spec(node: Any, config: Any) -> Any:
        if node["metadata"]["name"] == "gpu-1":
            raise KeyError("a bug")
        return real(node, config)

    monkeypatch.setattr(kube_cache.kube_nodes, "node_spec", node_spec)
    add_pods(api, [pod("a", gpus=8)])
    run(sched)
    assert bound(api) == {"a": "gpu-2"} and sched.kcache.failures == 1 and sched.stats.errors == 0
