"""MIG partitions through claims in the Kubernetes world (in-memory API server): a GPU published as
partitionable devices with shared counters, its MIG instances given to pods of different claims until
the counters are spent, and the pod that would exceed them pending with the request named."""

from __future__ import annotations

from typing import Any

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue, QueueSpec
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore
from gpufleet.sharing.dra_slices import node_slices

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_dra_scheduler import CLAIMS, DRA, run, stored
from .test_scheduler import add_node, bound


def mig_selector(profile: str) -> str:
    attributes = 'device.attributes["gpu.nvidia.com"]'
    return f'{attributes}.type == "mig" && {attributes}.profile == "{profile}"'


def publish_mig(api: FakeApiServer, name: str) -> None:
    api.put(
        f"{DRA}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
        },
    )
    add_node(api, name, gpus=0)
    for i, spec in enumerate(node_slices(name, gpu_model="H100-80GB", gpus=1, mig_gpus=[0])):
        api.put(
            f"{DRA}/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpu.nvidia.com-{i}"},
                "spec": spec.to_dict(),
            },
        )


def mig_claim(api: FakeApiServer, name: str, profile: str) -> None:
    selectors = [{"cel": {"expression": mig_selector(profile)}}]
    exactly = {"deviceClassName": "gpu.nvidia.com", "selectors": selectors}
    api.put(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"devices": {"requests": [{"name": "mig", "exactly": exactly}]}},
        },
    )


def mig_pod(name: str, made: str, **kw: Any) -> dict:
    obj = pod(name, gpus=None, **kw)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "half-gpu"}]
    obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": made}]
    return obj


def test_two_pods_share_one_gpus_mig_partitions_and_a_third_pends_on_its_counters(
    api: FakeApiServer,
) -> None:
    store = KubeStore(api)
    for queue in ("default", "team-a"):
        quota = {"3g.40gb": FlavorQuota(nominal=8), "1g.10gb": FlavorQuota(nominal=8)}
        store.create(Queue(metadata=ObjectMeta(name=queue), spec=QueueSpec(quotas=quota)))
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    publish_mig(api, "mig-1")  # one H100, no fixed MIG layout: its partitions follow its claims
    # Two 3g.40gb instances take all 8 memory slices; a 1g.10gb instance is a device no claim holds,
    # but every one of them needs a memory slice the two took.
    for name, profile in (("a", "3g.40gb"), ("b", "3g.40gb"), ("c", "1g.10gb")):
        mig_claim(api, f"{name}-gpu", profile)
        created = f"2026-11-29T11:00:0{'abc'.index(name)}Z"
        api.put("/api/v1/namespaces/team-a/pods", mig_pod(name, f"{name}-gpu", created=created))
    run(sched)
    result = run(sched)
    assert bound(api) == {"a": "mig-1", "b": "mig-1"}
    taken = {}
    for name in ("a", "b"):
        (device,) = stored(api, f"{name}-gpu")["status"]["allocation"]["devices"]["results"]
        assert device["request"] == "mig" and device["device"].startswith("gpu-0-mig-")
        taken[name] = device["device"]
    # gpu-0-mig-<profile id>-<start>-<memory slices>: the instances at slices 0-3 and 4-7
    assert sorted(int(d.split("-")[4]) for d in taken.values()) == [0, 4]
    assert result is not None
    reason = result.pending["team-a/c"].reason
    assert reason.type == "NoFit" and "request mig: shared counters" in reason.message, reason
    assert "allocation" not in stored(api, "c-gpu").get("status", {})
    # One 3g.40gb instance given back: the 1g.10gb one fits in its slices.
    api.request("DELETE", "/api/v1/namespaces/team-a/pods/a", body={"gracePeriodSeconds": 0})
    run(sched)
    run(sched)
    assert bound(api) == {"b": "mig-1", "c": "mig-1"}
    (device,) = stored(api, "c-gpu")["status"]["allocation"]["devices"]["results"]
    start = int(device["device"].split("-")[4])
    freed = int(taken["a"].split("-")[4])
    assert freed <= start < freed + 4, (taken, device)
