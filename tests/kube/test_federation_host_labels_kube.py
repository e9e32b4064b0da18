"""The worker's hosts grouped by label travel through the Cluster custom resource (the CRD keeps them),
and the manager sends a job whose pod template selects a label only one worker's hosts carry to that
worker, though the other is cheaper; a template no worker could turn into pods stays in the manager."""

from __future__ import annotations

from gpufleet.api.cluster import Cluster
from gpufleet.api.labels import CAPACITY_TYPE_LABEL
from gpufleet.api.queue import Queue
from gpufleet.api.validation import parse_object
from gpufleet.cli.kube_federation import WorkerLoop
from gpufleet.federation.link import CLUSTER, MODEL
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.state import FleetState
from gpufleet.kube.store import KubeStore

from .test_federation_kube import Federation, job

SPOT = "H100-80GB/spot"


def pool(name: str, hosts: int) -> FleetState:
    state = FleetState()
    for i in range(hosts):
        labels = {"pool": name, "kubernetes.io/hostname": f"{name}-{i}"}
        state.add_node(
            NodeSpec(f"{name}-{i}", gpu_model="H100-80GB", gpus=8, cpu_milli=64_000, labels=labels)
        )
    return state


def test_a_job_selecting_a_pool_runs_in_the_worker_that_has_it() -> None:
    fed = Federation()
    fed.agents["w1"] = WorkerLoop(
        fed.workers["w1"], fed.manager, "w1", lambda: pool("on-demand", 2), clock=lambda: fed.now
    )
    fed.agents["w2"] = WorkerLoop(
        fed.workers["w2"], fed.manager, "w2", lambda: pool("a100-spot", 2), clock=lambda: fed.now
    )
    spot = job("spot")
    spot.spec.worker.template = {
        "spec": {"nodeSelector": {"pool": "a100-spot"}, "containers": [{"name": "c"}]}
    }
    broken = job("broken")
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Near"}]}]}
    broken.spec.worker.template = {
        "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}}
    }
    for obj in (spot, broken, job("plain")):
        fed.store.create(obj)
    fed.run(3)
    report = KubeStore(fed.manager).get(Cluster, "w2").status.capacity["H100-80GB"].host_labels
    assert report is not None and report.common == {"pool": "a100-spot"} and len(report.groups) == 2
    assert [g.most_free_cpu_milli for g in report.groups] == [{"8": 64_000}] * 2, "the CRD keeps the room"
    assert fed.held("plain").metadata.annotations[CLUSTER] == "w1", "the cheaper worker"
    assert fed.held("spot").metadata.annotations[CLUSTER] == "w2", "w1 is cheaper, but has no such host"
    waiting = fed.held("broken")
    assert CLUSTER not in waiting.metadata.annotations
    assert (
        waiting.status.pending_reason is not None and waiting.status.pending_reason.type == "InvalidTemplate"
    )
    assert "nodeSelectorTerms.0.matchExpressions.0.operator" in waiting.status.pending_reason.message


def capacity_typed(name: str, capacity: str, hosts: int) -> FleetState:
    state = FleetState()
    for i in range(hosts):
        labels = {CAPACITY_TYPE_LABEL: capacity}
        state.add_node(
            NodeSpec(f"{name}-{i}", gpu_model="H100-80GB", gpus=8, cpu_milli=64_000, labels=labels)
        )
    return state


def test_a_spot_flavor_runs_on_the_workers_spot_hosts_and_is_granted_and_charged_as_spot() -> None:
    fed = Federation()
    fed.agents["w1"] = WorkerLoop(
        fed.workers["w1"],
        fed.manager,
        "w1",
        lambda: capacity_typed("od", "on-demand", 2),
        clock=lambda: fed.now,
    )
    fed.agents["w2"] = WorkerLoop(
        fed.workers["w2"], fed.manager, "w2", lambda: capacity_typed("sp", "spot", 2), clock=lambda: fed.now
    )
    spot_queue = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "spot"},
            "spec": {"quotas": {SPOT: {"nominal": 8}}},
        }
    )
    fed.store.create(spot_queue)
    for name in ("a", "b"):
        obj = job(name)
        obj.spec.queue = "spot"
        fed.store.create(obj)
        fed.run(3)  # b arrives after a is held: the quota is counted again from a's record
    held = fed.held("a")
    assert held.metadata.annotations[CLUSTER] == "w2", "w1 is cheaper, but has no spot host"
    assert held.metadata.annotations[MODEL] == SPOT
    granted = KubeStore(fed.workers["w2"]).get(Queue, "spot")
    assert set(granted.spec.quotas) == {SPOT}, "the worker's scheduler places it on spot hosts too"
    waiting = fed.held("b")
    assert CLUSTER not in waiting.metadata.annotations
    assert waiting.status.pending_reason is not None and waiting.status.pending_reason.type == "QuotaExceeded"
