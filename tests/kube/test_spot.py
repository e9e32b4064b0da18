"""Pods the operator creates tolerate the spot taint exactly when their queue offers spot capacity."""

from __future__ import annotations

from gpufleet.kube.owned import SPOT_TOLERATION, with_spot_toleration

from .fakeapi import FakeApiServer

QUEUES = "/apis/gpufleet.io/v1alpha1/queues"


def worker(queue: str | None, tolerations: list[dict] | None = None) -> dict:
    labels = {"gpufleet.io/queue": queue} if queue else {}
    return {"metadata": {"name": "w", "labels": labels}, "spec": {"tolerations": tolerations or []}}


def add_queue(api: FakeApiServer, name: str, *flavors: str) -> None:
    quotas = {flavor: {"nominal": 8} for flavor in flavors}
    api.request("POST", QUEUES, body={"metadata": {"name": name}, "spec": {"quotas": quotas}})


def test_only_a_queue_with_a_spot_flavor_brings_the_toleration() -> None:
    api = FakeApiServer()
    add_queue(api, "mixed", "H100-80GB/on-demand", "H100-80GB/spot")
    add_queue(api, "steady", "H100-80GB", "H100-80GB/on-demand")
    add_queue(api, "default", "A100-80GB/spot")
    assert with_spot_toleration(api, worker("mixed"))["spec"]["tolerations"] == [SPOT_TOLERATION]
    assert with_spot_toleration(api, worker("steady"))["spec"]["tolerations"] == []
    assert with_spot_toleration(api, worker(None))["spec"]["tolerations"] == [SPOT_TOLERATION]
    assert with_spot_toleration(api, worker("missing"))["spec"]["tolerations"] == []


def test_a_toleration_the_user_wrote_is_kept_and_not_doubled() -> None:
    api = FakeApiServer()
    add_queue(api, "mixed", "H100-80GB/spot")
    everything = [{"operator": "Exists"}]
    assert with_spot_toleration(api, worker("mixed", everything))["spec"]["tolerations"] == everything
    own = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert with_spot_toleration(api, worker("mixed", own))["spec"]["tolerations"] == [*own, SPOT_TOLERATION]
    no_execute = [{"key": "gpufleet.io/spot", "operator": "Exists", "effect": "NoExecute"}]
    assert SPOT_TOLERATION in with_spot_toleration(api, worker("mixed", no_execute))["spec"]["tolerations"]
