"""GPUPools on Nodes, spot interruption drains and GPU health, against the in-memory API server."""

from __future__ import annotations

import pytest

from gpufleet.api.labels import CORDONED_BY_ANNOTATION, POOL_LABEL, SPOT_TAINT
from gpufleet.kube.config import DEVICE_PLUGIN_CONFIG_LABEL, INTERRUPTION_ANNOTATION, MIG_CONFIG_LABEL
from gpufleet.kube.fleet import pool_labels, unhealthy_reason
from gpufleet.kube.operator import Operator

from .fakeapi import FakeApiServer
from .fixtures import node, pod
from .test_operator import Clock
from .test_scheduler import NODES, add_node

POOLS = "/apis/gpufleet.io/v1alpha1/gpupools"
MERGE = "application/merge-patch+json"


def make_pool(api: FakeApiServer, name: str, **spec: object) -> None:
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": name},
        "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8, "nodeSelector": {"pool": name}, **spec},
    }
    api.request("POST", POOLS, body=body)


def sync(op: Operator) -> None:
    for informer in (op.nodes, op.pools):
        informer.relist()
    for n in op.nodes.items():
        op.mark("Node", n["metadata"]["name"])
    for p in op.pools.items():
        op.mark("GPUPool", p["metadata"]["name"])
    op.reconcile_once()


def get_node(api: FakeApiServer, name: str) -> dict:
    return api.get(f"{NODES}/{name}")


def annotate(api: FakeApiServer, name: str, key: str, value: str | None) -> None:
    api.request(
        "PATCH", f"{NODES}/{name}", body={"metadata": {"annotations": {key: value}}}, content_type=MERGE
    )


def place(api: FakeApiServer, name: str, on: str, **kw) -> None:
    body = pod(name, namespace="team-a", **kw)
    body["spec"]["nodeName"] = on
    api.put("/api/v1/namespaces/team-a/pods", body)


def events(api: FakeApiServer, reason: str) -> list[dict]:
    return [e for e in api.objects.get("/v1/events", {}).values() if e["reason"] == reason]


@pytest.fixture
def op(api: FakeApiServer) -> Operator:
    return Operator(api, clock=Clock())


def test_a_spot_pool_labels_taints_and_configures_sharing_on_its_nodes(api: FakeApiServer, op) -> None:
    make_pool(api, "spot-a", capacityType="spot", sharing={"timeSlicing": {"replicas": 4}})
    add_node(api, "n1", labels={"pool": "spot-a"})
    add_node(api, "n2", labels={"pool": "other"})
    sync(op)
    n1, n2 = get_node(api, "n1"), get_node(api, "n2")
    assert n1["metadata"]["labels"][POOL_LABEL] == "spot-a"
    assert n1["metadata"]["labels"][DEVICE_PLUGIN_CONFIG_LABEL] == "time-slicing-4"
    assert {"key": SPOT_TAINT, "value": "true", "effect": "NoSchedule"} in n1["spec"]["taints"]
    assert POOL_LABEL not in n2["metadata"]["labels"] and not n2["spec"].get("taints")
    pool = api.get(f"{POOLS}/spot-a")["status"]
    assert (pool["nodes"], pool["readyNodes"], pool["gpus"]) == (1, 1, 8)
    # The node leaves the pool: what the pool put on it goes, its other labels and taints stay.
    taints = [*n1["spec"]["taints"], {"key": "admin", "effect": "NoSchedule"}]
    patch = {"metadata": {"labels": {"pool": "other", "team": "x"}}, "spec": {"taints": taints}}
    api.request("PATCH", f"{NODES}/n1", body=patch, content_type=MERGE)
    sync(op)
    n1 = get_node(api, "n1")
    assert (
        POOL_LABEL not in n1["metadata"]["labels"]
        and DEVICE_PLUGIN_CONFIG_LABEL not in n1["metadata"]["labels"]
    )
    assert n1["metadata"]["labels"]["team"] == "x"
    assert [t["key"] for t in n1["spec"]["taints"]] == ["admin"]
    assert api.get(f"{POOLS}/spot-a")["status"]["nodes"] == 0


def _mig_pool(layout: dict[str, list[str]]) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"gpuModel": "A100-80GB", "sharing": {"mig": layout}}}


def test_mig_pools_name_a_mig_manager_configuration() -> None:
    assert pool_labels(_mig_pool({"*": ["1g.10gb"] * 7}))[MIG_CONFIG_LABEL] == "all-1g.10gb"
    assert pool_labels(_mig_pool({"0": ["3g.40gb"], "1": ["7g.80gb"]}))[MIG_CONFIG_LABEL] == "gpufleet-p"


def test_a_uniform_pool_below_the_full_count_gets_its_own_entry_not_the_stock_one() -> None:
    # NVIDIA's stock all-1g.10gb makes 7 instances per GPU; a pool of 2 per GPU must name its own entry.
    assert pool_labels(_mig_pool({"*": ["1g.10gb"] * 2}))[MIG_CONFIG_LABEL] == "gpufleet-p"
    assert pool_labels(_mig_pool({"*": ["3g.40gb"] * 2}))[MIG_CONFIG_LABEL] == "all-3g.40gb"


def test_an_interruption_notice_cordons_and_evicts_with_a_reason(api: FakeApiServer, op) -> None:
    add_node(api, "spot-1")
    place(api, "worker", "spot-1")
    daemon = pod("agent", namespace="team-a")
    daemon["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "a", "uid": "u"}
    ]
    daemon["spec"]["nodeName"] = "spot-1"
    api.put("/api/v1/namespaces/team-a/pods", daemon)
    api.blocked_evictions.add(("team-a", "worker"))
    annotate(api, "spot-1", INTERRUPTION_ANNOTATION, "2026-11-29T12:02:00Z")
    sync(op)
    current = get_node(api, "spot-1")
    assert current["spec"]["unschedulable"] is True
    assert current["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == "spot-interruption"
    worker = api.get("/api/v1/namespaces/team-a/pods/worker")
    assert not worker["metadata"].get("deletionTimestamp"), "the budget refused; retried later"
    assert ("Node", "spot-1") in op.requeue
    api.blocked_evictions.clear()
    op.clock.now = op.requeue[("Node", "spot-1")]
    op.reconcile_once()
    worker = api.get("/api/v1/namespaces/team-a/pods/worker")
    assert worker["metadata"].get("deletionTimestamp"), "evicted through the Eviction API"
    target = next(c for c in worker["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert target["reason"] == "SpotInterruption"
    assert [e["involvedObject"]["name"] for e in events(api, "SpotInterruption")] == ["spot-1", "worker"]
    assert not api.get("/api/v1/namespaces/team-a/pods/agent")["metadata"].get("deletionTimestamp")


def test_unhealthy_gpus_drain_the_node_and_only_the_operators_cordon_is_lifted(
    api: FakeApiServer, op
) -> None:
    api.put(NODES, node("sick", gpus=8, allocatable_gpus=7))
    api.put(NODES, node("admin-cordoned", gpus=8, allocatable_gpus=7, unschedulable=True))
    place(api, "job", "sick")
    sync(op)
    sick = get_node(api, "sick")
    assert sick["spec"]["unschedulable"] is True
    assert sick["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == "gpu-health"
    assert api.get("/api/v1/namespaces/team-a/pods/job")["metadata"].get("deletionTimestamp")
    assert "7 of 8" in events(api, "GPUUnhealthy")[0]["message"]
    # Repaired: allocatable is back at capacity.
    for name in ("sick", "admin-cordoned"):
        status = {
            "status": {"allocatable": {**get_node(api, name)["status"]["allocatable"], "nvidia.com/gpu": "8"}}
        }
        api.request("PATCH", f"{NODES}/{name}/status", body=status, content_type=MERGE)
    sync(op)
    healed = get_node(api, "sick")
    assert not healed["spec"].get("unschedulable")
    assert CORDONED_BY_ANNOTATION not in healed["metadata"].get("annotations", {})
    assert get_node(api, "admin-cordoned")["spec"]["unschedulable"] is True, "not ours to lift"


def test_what_counts_as_unhealthy() -> None:
    assert unhealthy_reason(node("ok")) is None
    assert "nvidia.com/gpu: 6 of 8" in (unhealthy_reason(node("a", allocatable_gpus=6)) or "")
    mig = node("m", extra={"nvidia.com/mig-1g.10gb": "7"})
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "6"
    assert "mig-1g.10gb" in (unhealthy_reason(mig) or "")
    flagged = node("c")
    flagged["status"]["conditions"].append({"type": "GPUUnhealthy", "status": "True", "message": "Xid 79"})
    assert "Xid 79" in (unhealthy_reason(flagged) or "")
    assert "agent" in (unhealthy_reason(node("d", annotations={"gpufleet.io/unhealthy-gpus": "3"})) or "")
