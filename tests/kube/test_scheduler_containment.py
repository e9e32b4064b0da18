"""A bug the Kubernetes scheduler meets on one workload or node stops no pass: the other pods are bound,
the workload's pods say why they wait, what its bound pods hold stays held, and it is accounted again
when its pods change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.kube import cache as kube_cache
from gpufleet.kube import nodes as kube_nodes
from gpufleet.kube import scheduler as kube_scheduler
from gpufleet.kube.actions import Actions
from gpufleet.kube.scheduler import KubeScheduler

from .fakeapi import FakeApiServer
from .fixtures import gang, pod
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


def test_a_pod_whose_placement_raises_waits_alone_counted_and_is_tried_when_it_changes(
    api: FakeApiServer, placement_bug: Callable[[Callable[[str], bool]], dict[str, bool]]
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    bug = placement_bug(lambda name: name.endswith("/bad"))
    add_pods(api, [pod("a", gpus=2), pod("bad", gpus=2), pod("z", gpus=2)])
    run(sched)
    assert set(bound(api)) == {"a", "z"}
    assert sched.stats.errors == 0 and sched.kcache.failures >= 1
    scheduled = condition(api, "bad", "PodScheduled")
    assert scheduled is not None and "SchedulingError" in scheduled["message"]
    assert "OverflowError" in scheduled["message"]
    run(sched)  # its pod changed once more: the scheduler wrote why it waits
    failed = sched.kcache.failures
    run(sched)
    assert sched.kcache.failures == failed  # not tried while its pod is unchanged
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


def test_an_admission_the_scheduler_fails_to_carry_out_binds_none_of_its_gang_and_the_rest_go_on(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    real = kube_scheduler.pod_usage
    calls = {"odd": 0}

    def pod_usage(request: Any, model: Any) -> Any:
        if request.gpus == 3:  # the gang `odd`, 3 GPUs a pod: its second pod trips the bug
            calls["odd"] += 1
            if calls["odd"] % 2 == 0:
                raise ArithmeticError("a bug its numbers trip")
        return real(request, model)

    monkeypatch.setattr(kube_scheduler, "pod_usage", pod_usage)
    add_pods(api, [*gang("odd", 2, gpus=3), pod("a", gpus=4)])
    run(sched)
    assert bound(api) == {"a": bound(api)["a"]}  # none of the gang: a gang is bound whole or not at all
    assert sched.stats.errors == 0 and sched.kcache.failures == 1
    why = condition(api, "odd-0", "PodScheduled")
    assert why is not None and "SchedulingError" in why["message"] and "ArithmeticError" in why["message"]
    assert not [key for key in sched.kcache.assumed if key.startswith("team-a/odd")]
    assert "team-a/odd" not in sched.kcache.cache.admitted
    run(sched)
    failed = sched.kcache.failures
    run(sched)
    assert sched.kcache.failures == failed  # not tried again while its pods are unchanged
    monkeypatch.setattr(kube_scheduler, "pod_usage", real)
    patch = {"metadata": {"labels": {"touched": "yes"}}}
    api.request("PATCH", f"{PODS}/odd-0", body=patch, content_type="application/merge-patch+json")
    run(sched)
    assert {"odd-0", "odd-1", "a"} == set(bound(api))


def test_a_victim_the_scheduler_fails_to_evict_keeps_its_gpus_and_is_not_chosen_again(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_pods(api, [pod("low", gpus=8, priority=1)])
    run(sched)
    asked: list[str] = []

    def evict(actions: Actions, victim: dict, **kw: Any) -> bool:
        asked.append(victim["metadata"]["name"])
        raise KeyError("a bug")

    monkeypatch.setattr(Actions, "evict", evict)
    add_pods(api, [pod("high", gpus=8, priority=1000, created="2026-11-29T11:30:00Z")])
    run(sched)
    run(sched)
    run(sched)
    assert bound(api) == {"low": "gpu-1"}  # nothing placed on the GPUs it still holds
    assert asked == ["low"] and sched.stats.errors == 0 and sched.kcache.failures == 1
    add_node(api, "gpu-2")  # the others go on
    run(sched)
    assert bound(api) == {"low": "gpu-1", "high": "gpu-2"}
