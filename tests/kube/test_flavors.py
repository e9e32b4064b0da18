"""Quota flavors in the Kubernetes world: a Queue's flavor order survives the API server, and a
scheduler that starts later (restart, failover) charges running workloads to the flavor they were
admitted under: a capacity type, a MIG profile."""

from __future__ import annotations

import json
from typing import Any

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue, QueueSpec
from gpufleet.kube.resources import resource_for
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import add_node, add_pods, bound, condition, run

QUEUE = "team-a"
ON_DEMAND, SPOT = "H100-80GB/on-demand", "H100-80GB/spot"
CAPACITY = "gpufleet.io/capacity-type"


def add_queue(api: FakeApiServer, quotas: dict[str, float], order: list[str] | None = None) -> None:
    spec = QueueSpec(quotas={f: FlavorQuota(nominal=n) for f, n in quotas.items()}, flavor_order=order)
    KubeStore(api).create(Queue(metadata=ObjectMeta(name=QUEUE), spec=spec))


def scheduler(api: FakeApiServer) -> KubeScheduler:
    """A scheduler process starting now (the first, or one after a restart or failover)."""
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


def gpu_pod(name: str, gpus: int | None = 4, **kw: Any) -> dict:
    return pod(name, gpus=gpus, labels={"gpufleet.io/queue": QUEUE}, **kw)


def running(name: str, node: str, **kw: Any) -> dict:
    """A pod bound and running before this scheduler started (bound by hand or by an older version)."""
    return gpu_pod(name, node_name=node, phase="Running", **kw)


def usage(sched: KubeScheduler) -> dict[str, int]:
    cache = sched.kcache.cache
    assert cache is not None
    return {flavor: cache.usage.usage(QUEUE, flavor) for flavor in cache.tree.nodes[QUEUE].quotas}


def capacity_nodes(api: FakeApiServer) -> None:
    add_node(api, "od1", labels={CAPACITY: "on-demand"})
    add_node(api, "sp1", labels={CAPACITY: "spot"})


# ---------------------------------------------------------------------------- flavor order
def test_the_api_server_returns_quota_keys_sorted_so_the_written_order_is_lost(api: FakeApiServer) -> None:
    capacity_nodes(api)
    add_queue(api, {SPOT: 4, ON_DEMAND: 8})  # spot written first, without flavorOrder
    stored = api.get(resource_for("Queue").item(QUEUE))
    assert list(stored["spec"]["quotas"]) == [ON_DEMAND, SPOT]
    sched = scheduler(api)
    add_pods(api, [gpu_pod("first")])
    run(sched)
    assert bound(api) == {"first": "od1"}  # the documented rule: sorted order, on-demand first


def test_flavor_order_is_honoured_through_the_api_server(api: FakeApiServer) -> None:
    capacity_nodes(api)
    add_queue(api, {ON_DEMAND: 8, SPOT: 4}, order=[SPOT, ON_DEMAND])
    sched = scheduler(api)
    add_pods(api, [gpu_pod("first")])
    run(sched)
    assert bound(api) == {"first": "sp1"}
    add_pods(api, [gpu_pod("second")])
    run(sched)
    assert bound(api) == {"first": "sp1", "second": "od1"}  # spot quota used up: on-demand next
    assert usage(sched) == {SPOT: 4000, ON_DEMAND: 4000}


def test_a_flavor_order_that_misses_a_flavor_leaves_the_queue_out_and_says_why(api: FakeApiServer) -> None:
    add_node(api, "gpu-1")
    # kubectl writes what the API's own validation would refuse: the CRD schema cannot check it.
    queue = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": QUEUE},
        "spec": {"quotas": {ON_DEMAND: {"nominal": 8}, SPOT: {"nominal": 4}}, "flavorOrder": [SPOT]},
    }
    api.put(resource_for("Queue").collection(), queue)
    sched = scheduler(api)
    add_pods(api, [gpu_pod("p")])
    run(sched)
    assert bound(api) == {}
    valid = api.get(resource_for("Queue").item(QUEUE))["status"]["conditions"][0]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.flavorOrder" in valid["message"] and repr(ON_DEMAND) in valid["message"]


# ---------------------------------------------------------------------------- re-admission
def test_a_pod_bound_on_spot_before_a_restart_is_charged_to_the_spot_flavor(api: FakeApiServer) -> None:
    capacity_nodes(api)
    add_queue(api, {ON_DEMAND: 8, SPOT: 4}, order=[SPOT, ON_DEMAND])
    add_pods(api, [running("old", "sp1")])  # no flavor noted: derived from the node's capacity type
    sched = scheduler(api)
    add_pods(api, [gpu_pod("new")])
    run(sched)
    # spot quota is held by the running pod, so the new one goes on-demand though spot has room
    assert bound(api) == {"old": "sp1", "new": "od1"}
    assert usage(sched) == {SPOT: 4000, ON_DEMAND: 4000}


def test_the_flavor_noted_at_bind_time_is_charged_after_a_restart(api: FakeApiServer) -> None:
    # A plain-model flavor first, then spot; only spot nodes. The node alone cannot tell which flavor
    # a pod on it was admitted under: the first pod takes the plain quota, the second the spot quota.
    add_node(api, "sp1", labels={CAPACITY: "spot"})
    add_queue(api, {"H100-80GB": 4, SPOT: 4})
    first = scheduler(api)
    add_pods(api, [gpu_pod("a"), gpu_pod("b", created="2026-11-29T11:00:01Z")])
    run(first)
    assert bound(api) == {"a": "sp1", "b": "sp1"}
    before = usage(first)
    assert before == {"H100-80GB": 4000, SPOT: 4000}
    noted = {
        name: api.objects["/v1/pods"][("team-a", name)]["metadata"]["annotations"]["gpufleet.io/flavor"]
        for name in ("a", "b")
    }
    assert noted == {"a": "H100-80GB", "b": SPOT}
    second = scheduler(api)  # failover: a new process rebuilds its cache from the pods
    run(second)
    assert usage(second) == before
    add_pods(api, [gpu_pod("c")])
    run(second)
    assert "c" not in bound(api) and condition(api, "c", "PodScheduled")["message"].startswith(
        "QuotaExceeded"
    )


def test_a_noted_flavor_the_queue_no_longer_has_is_derived_again(api: FakeApiServer) -> None:
    capacity_nodes(api)
    add_queue(api, {ON_DEMAND: 8, SPOT: 8})
    add_pods(api, [running("old", "sp1", annotations={"gpufleet.io/flavor": "H100-80GB"})])
    sched = scheduler(api)
    run(sched)
    assert usage(sched) == {ON_DEMAND: 0, SPOT: 4000}


def test_a_plain_model_queue_is_charged_the_plain_model(api: FakeApiServer) -> None:
    capacity_nodes(api)
    add_queue(api, {"H100-80GB": 8})
    add_pods(api, [running("old", "sp1")])
    sched = scheduler(api)
    run(sched)
    assert usage(sched) == {"H100-80GB": 4000}


def test_mig_pods_are_charged_to_their_profile_after_a_restart(api: FakeApiServer) -> None:
    mig_labels = {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
    add_node(api, "mig1", gpus=0, extra={"nvidia.com/mig-1g.10gb": "7"}, labels=mig_labels)
    add_queue(api, {"A100-80GB": 8, "1g.10gb": 2})
    mig = {"nvidia.com/mig-1g.10gb": "1"}
    first = scheduler(api)
    add_pods(api, [gpu_pod("m1", gpus=None, resources=mig)])
    run(first)
    annotations = api.objects["/v1/pods"][("team-a", "m1")]["metadata"]["annotations"]
    assert annotations["gpufleet.io/flavor"] == "1g.10gb" and "mig" in json.loads(
        annotations["gpufleet.io/gpus"]
    )
    add_pods(api, [running("m0", "mig1", gpus=None, resources=mig)])  # bound by hand: nothing noted
    second = scheduler(api)
    add_pods(api, [gpu_pod("m2", gpus=None, resources=mig)])
    run(second)
    assert usage(second) == {"A100-80GB": 0, "1g.10gb": 2000}
    assert "m2" not in bound(api)
    assert condition(api, "m2", "PodScheduled")["message"].startswith("QuotaExceeded")
