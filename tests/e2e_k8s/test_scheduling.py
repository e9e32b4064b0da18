"""Bindings, gangs, topology, preemption through evictions and pending reasons on a real API server."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpufleet.kube.transport import MERGE_PATCH

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.k8s


def test_a_pod_is_bound_through_the_binding_subresource(cluster: Cluster, scheduler: Any) -> None:
    node = cluster.node("a")
    cluster.pod("single", gpus=2)
    assert wait_for("pod bound", lambda: cluster.node_of("single")) == node
    annotations = cluster.get_pod("single")["metadata"].get("annotations") or {}
    assert "gpufleet.io/gpus" in annotations
    # The run's Queue counts it: the Admitted column of `kubectl get queues`.
    path = f"/apis/gpufleet.io/v1alpha1/queues/{cluster.queue}"
    status = wait_for(
        "queue status counts the pod",
        lambda: (
            (s := cluster.api.request("GET", path).get("status") or {}).get("admittedWorkloads", 0) >= 1 and s
        ),
    )
    assert status["usage"].get("H100-80GB", 0) >= 2
    assert "pendingWorkloads" in status  # the Pending column is filled too


def test_a_gang_is_bound_only_when_all_members_fit(cluster: Cluster, scheduler: Any) -> None:
    for name in ("a", "b", "c"):
        cluster.node(name)
    members = cluster.gang("llm", 4)
    reason = wait_for("pending reason", lambda: cluster.condition(members[0], "PodScheduled"))
    assert reason["status"] == "False" and reason["reason"] == "Unschedulable"
    assert reason["message"].startswith("NoFit"), reason["message"]
    assert all(cluster.node_of(m) is None for m in members)
    assert wait_for("FailedScheduling events", lambda: cluster.events("FailedScheduling"))
    cluster.node("d")
    nodes = wait_for(
        "gang bound",
        lambda: all(cluster.node_of(m) for m in members) and [cluster.node_of(m) for m in members],
    )
    assert len(set(nodes)) == 4


def test_required_topology_keeps_the_gang_in_one_rack(cluster: Cluster, scheduler: Any) -> None:
    r1 = [cluster.node(f"r1-{i}", labels={"gpufleet.io/rack": "r1"}) for i in range(2)]
    r2 = [cluster.node(f"r2-{i}", labels={"gpufleet.io/rack": "r2"}) for i in range(3)]
    members = cluster.gang("ring", 3, annotations={"gpufleet.io/topology-required": "rack"})
    wait_for("gang bound", lambda: all(cluster.node_of(m) for m in members), timeout=60)
    assert {cluster.node_of(m) for m in members} == set(r2)
    assert not {cluster.node_of(m) for m in members} & set(r1)


def test_pods_labelled_inference_spread_over_nodes(cluster: Cluster, scheduler: Any) -> None:
    # Without the label the two would pack onto one node (batch's fgd+); inference spreads.
    nodes = {cluster.node("a"), cluster.node("b")}
    labels = {"gpufleet.io/workload-class": "inference"}
    for name in ("serve-0", "serve-1"):
        cluster.pod(name, gpus=1, labels=labels)
    placed = wait_for(
        "both replicas bound",
        lambda: (
            all(cluster.node_of(n) for n in ("serve-0", "serve-1"))
            and [cluster.node_of(n) for n in ("serve-0", "serve-1")]
        ),
    )
    assert set(placed) == nodes, placed


def test_a_pod_stating_a_cuda_version_goes_only_where_the_driver_runs_it(
    cluster: Cluster, scheduler: Any
) -> None:
    # GFD's driver labels: a CUDA 11.4-era driver and a CUDA 12.8 one.
    cluster.node("old", labels={"nvidia.com/cuda.driver-version.full": "470.82.01"})
    new = cluster.node("new", labels={"nvidia.com/cuda.driver-version.full": "570.124.06"})
    cuda = {"gpufleet.io/cuda-version": "12.8"}
    cluster.pod("cuda", gpus=8, annotations=cuda)
    assert wait_for("pod bound", lambda: cluster.node_of("cuda")) == new
    # The old node is free, but its driver cannot run CUDA 12.8: the next such pod waits and says why.
    cluster.pod("cuda-late", gpus=8, annotations=cuda)
    why = wait_for(
        "pending reason",
        lambda: (c := cluster.condition("cuda-late", "PodScheduled")) and c["status"] == "False" and c,
    )
    assert why["message"].startswith("NoFit") and "CudaDriver" in why["message"], why["message"]
    assert "CUDA 12.8" in why["message"] and "570.124.06" in why["message"], why["message"]
    assert cluster.node_of("cuda-late") is None


def test_a_pod_with_required_node_affinity_is_bound_only_to_a_node_it_accepts(
    cluster: Cluster, scheduler: Any
) -> None:
    zone = "topology.kubernetes.io/zone"
    cluster.node("zone-a", labels={zone: "a"})
    b = cluster.node("zone-b", labels={zone: "b"})
    to_b = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": zone, "operator": "In", "values": ["b"]}]}
                ]
            }
        }
    }
    cluster.pod("affine", gpus=8, affinity=to_b)
    assert wait_for("pod bound", lambda: cluster.node_of("affine")) == b
    # zone-b is full and zone-a empty: the next pod for zone b waits and says why, unbound.
    cluster.pod("affine-late", gpus=4, affinity=to_b)
    why = wait_for(
        "pending reason",
        lambda: (c := cluster.condition("affine-late", "PodScheduled")) and c["status"] == "False" and c,
    )
    assert why["message"].startswith("NoFit") and "1 NodeAffinity" in why["message"], why["message"]
    assert cluster.node_of("affine-late") is None


def test_preemption_goes_through_evictions_and_the_preemptor_follows(
    cluster: Cluster, scheduler: Any
) -> None:
    cluster.node("a")
    low = cluster.gang("low", 2, gpus=4, labels={"gpufleet.io/priority-class": "research"})
    wait_for("low bound", lambda: all(cluster.node_of(m) for m in low))
    cluster.pod("urgent", gpus=8, labels={"gpufleet.io/priority-class": "production-training"})
    wait_for(
        "victims asked to stop",
        lambda: all(cluster.get_pod(m)["metadata"].get("deletionTimestamp") for m in low),
    )
    # The Eviction API writes its own DisruptionTarget first; the scheduler's reason follows it.
    target = wait_for(
        "the victim's DisruptionTarget reason",
        lambda: (c := cluster.condition(low[0], "DisruptionTarget")) and c["reason"] == "Preempted" and c,
    )
    assert target["status"] == "True"
    assert wait_for("Preempted events", lambda: cluster.events("Preempted"))
    why = wait_for("preemptor's reason", lambda: cluster.condition("urgent", "PodScheduled"))
    assert why["message"].startswith("WaitingForPreemption"), why["message"]
    cluster.finish_deleting()  # without kubelets the victims never finish on their own
    assert wait_for("preemptor bound", lambda: cluster.node_of("urgent"), timeout=60)


def test_not_ready_nodes_are_left_alone(cluster: Cluster, scheduler: Any) -> None:
    name = f"e2e-{cluster.selector['gpufleet.io/e2e-run']}-fresh"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(cluster.selector)}}
    cluster.api.request("POST", "/api/v1/nodes", body=body)
    cluster.nodes.append(name)
    cluster.pod("waits", gpus=1)
    why = wait_for("pending reason", lambda: cluster.condition("waits", "PodScheduled"))
    assert why["status"] == "False" and cluster.node_of("waits") is None


def test_a_queue_left_out_of_the_quota_tree_says_so_and_its_pods_wait_for_it(
    cluster: Cluster, scheduler: Any
) -> None:
    queues = "/apis/gpufleet.io/v1alpha1/queues"
    name = f"{cluster.queue}-orphan"
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"parent": f"{cluster.queue}-missing", "quotas": {"H100-80GB": {"nominal": 8}}},
    }
    cluster.api.request("POST", queues, body=body)
    try:
        cluster.node("a")
        cluster.pod("orphaned", gpus=1, labels={"gpufleet.io/queue": name})
        said = wait_for("the queue's Valid condition", lambda: valid_of(cluster, name))
        assert said["status"] == "False" and said["reason"] == "InvalidParent", said
        assert f"{cluster.queue}-missing" in said["message"]
        why = wait_for("pending reason", lambda: cluster.condition("orphaned", "PodScheduled"))
        assert why["message"].startswith(f"QueueInvalid: queue '{name}'"), why["message"]
        assert cluster.node_of("orphaned") is None
        shared = wait_for("the run's own queue marked valid", lambda: valid_of(cluster, cluster.queue))
        assert shared["status"] == "True"
    finally:
        cluster.api.request("DELETE", f"{queues}/{name}")


def valid_of(cluster: Cluster, queue: str) -> Any:
    status = cluster.api.request("GET", f"/apis/gpufleet.io/v1alpha1/queues/{queue}").get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Valid"), None)


def test_a_drain_evicts_one_borrowed_gang_for_all_the_replicas_it_moves(
    cluster: Cluster, scheduler: Any
) -> None:
    # team-b borrows every GPU of nodes a and b with two 8-GPU gangs; draining node c moves three 1-GPU
    # replicas of team-a (within its nominal quota). One gang frees room for all three: the replicas
    # wait for its pods to terminate (capacity to come) and the second gang is left alone.
    queues = "/apis/gpufleet.io/v1alpha1/queues"
    org, team_a, team_b = (f"{cluster.queue}-{part}" for part in ("org", "a", "b"))
    specs = {
        org: {},
        team_a: {"parent": org, "quotas": {"H100-80GB": {"nominal": 24}}},
        team_b: {"parent": org, "quotas": {"H100-80GB": {"nominal": 0}}},
    }
    for name, spec in specs.items():
        body = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec,
        }
        cluster.api.request("POST", queues, body=body)
    try:
        replica = {"gpufleet.io/queue": team_a, "gpufleet.io/priority-class": "production-inference"}
        drained = cluster.node("c")
        old = [cluster.pod(f"old-{i}", gpus=1, labels=replica)["metadata"]["name"] for i in range(3)]
        wait_for("replicas on c", lambda: all(cluster.node_of(p) == drained for p in old))
        lent = {cluster.node("a"), cluster.node("b")}
        training = {"gpufleet.io/queue": team_b, "gpufleet.io/priority-class": "production-training"}
        host = {"gpufleet.io/topology-required": "host"}
        gangs = {g: cluster.gang(g, 2, gpus=4, labels=training, annotations=host) for g in ("g1", "g2")}
        members = [p for pods in gangs.values() for p in pods]
        wait_for("gangs bound", lambda: all(cluster.node_of(p) for p in members))
        assert {cluster.node_of(p) for p in members} == lent

        # The drain: c is cordoned, its replicas deleted (without a kubelet they stay terminating).
        patch = {"spec": {"unschedulable": True}}
        cluster.api.request("PATCH", f"/api/v1/nodes/{drained}", body=patch, content_type=MERGE_PATCH)
        for name in old:
            cluster.api.request("DELETE", f"/api/v1/namespaces/{cluster.namespace}/pods/{name}")
        new = [cluster.pod(f"new-{i}", gpus=1, labels=replica)["metadata"]["name"] for i in range(3)]

        def terminating() -> set[str]:
            return {p for p in members if cluster.get_pod(p)["metadata"].get("deletionTimestamp")}

        wait_for("a gang asked to stop", terminating)
        for name in new:
            why = wait_for(f"{name}'s reason", lambda n=name: cluster.condition(n, "PodScheduled"))
            assert why["message"].startswith("WaitingForPreemption"), why["message"]
        time.sleep(3)  # several passes of the scheduler while the victims terminate
        victims = terminating()
        assert victims in ({*gangs["g1"]}, {*gangs["g2"]}), victims
        assert all(cluster.node_of(p) is None for p in new)
        freed = cluster.node_of(sorted(victims)[0])

        cluster.finish_deleting()  # the kubelet's part, on every node
        wait_for("replicas bound", lambda: all(cluster.node_of(p) for p in new), timeout=60)
        assert {cluster.node_of(p) for p in new} == {freed}
        kept = set(members) - victims
        assert all(
            cluster.node_of(p) and not cluster.get_pod(p)["metadata"].get("deletionTimestamp") for p in kept
        )
    finally:
        for name in specs:
            cluster.api.request("DELETE", f"{queues}/{name}")


def test_a_scheduler_started_on_a_backlog_pages_through_it_and_counts_what_was_bound(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from gpufleet.kube import scheduler as kube_scheduler
    from gpufleet.kube import scheduler_informers
    from gpufleet.kube.config import KubeConfig

    full, free = cluster.node("full"), cluster.node("free")
    cluster.pod("held", gpus=8, node=full)  # bound before the scheduler starts
    waiting = [cluster.pod(f"w{i}", gpus=4)["metadata"]["name"] for i in range(5)]
    monkeypatch.setattr(scheduler_informers, "POD_PAGE", 2)
    config = KubeConfig(scheduler_name=cluster.scheduler_name, eviction_grace_seconds=5)
    sched = kube_scheduler.KubeScheduler(cluster.api, config=config, period=1.0)
    stop = threading.Event()
    sched.informers.start(stop)
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    thread.start()

    def placed() -> list[str]:
        return [node for name in waiting if (node := cluster.node_of(name))]

    try:
        wait_for("two pods bound", lambda: len(placed()) >= 2, timeout=60)
        assert sched.pods.synced
        time.sleep(3)  # more passes: nothing more fits
        assert placed() == [free, free]  # the held node counted as full from the first pass
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.contained_failures
def test_a_pod_the_scheduler_fails_on_waits_alone_saying_why(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, scheduler: Any
) -> None:
    from gpufleet.kube import cache as kube_cache

    real = kube_cache.kube_pods.workload
    bug = {"on": True}

    def workload(group: Any, *args: Any, **kwargs: Any) -> Any:
        if bug["on"] and any(p["metadata"]["name"] == "bad" for p in group.members):
            raise ZeroDivisionError("a bug its numbers trip")
        return real(group, *args, **kwargs)

    monkeypatch.setattr(kube_cache.kube_pods, "workload", workload)
    node = cluster.node("a")
    cluster.pod("bad", gpus=2)
    cluster.pod("good", gpus=2)
    assert wait_for("the other pod bound", lambda: cluster.node_of("good")) == node
    said = wait_for("why it waits", lambda: cluster.condition("bad", "PodScheduled"))
    assert said["status"] == "False" and said["message"].startswith("SchedulingError"), said
    assert cluster.node_of("bad") is None and scheduler.stats.errors == 0
    bug["on"] = False  # fixed; the pod is looked at again once it changes
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/bad"
    touched = {"metadata": {"labels": {"touched": "yes"}}}
    cluster.api.request("PATCH", path, body=touched, content_type=MERGE_PATCH)
    assert wait_for("the pod bound once it changed", lambda: cluster.node_of("bad")) == node


@pytest.mark.contained_failures
def test_a_gang_whose_binds_the_scheduler_fails_to_work_out_binds_none_and_the_next_pod_binds(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, scheduler: Any
) -> None:
    from gpufleet.kube import scheduler as kube_scheduler_module

    real = kube_scheduler_module.pod_usage
    bug = {"on": True, "calls": 0}

    def pod_usage(request: Any, model: Any) -> Any:
        if bug["on"] and request.gpus == 3:  # the gang's second pod trips it, after the first was done
            bug["calls"] += 1
            if bug["calls"] % 2 == 0:
                raise ArithmeticError("a bug its numbers trip")
        return real(request, model)

    monkeypatch.setattr(kube_scheduler_module, "pod_usage", pod_usage)
    node = cluster.node("a")
    odd = cluster.gang("odd", 2, gpus=3)
    cluster.pod("good", gpus=2)
    assert wait_for("the other pod bound", lambda: cluster.node_of("good")) == node
    said = wait_for("why the gang waits", lambda: cluster.condition(odd[0], "PodScheduled"))
    assert said["status"] == "False" and "ArithmeticError" in said["message"], said
    time.sleep(2)  # more passes: the gang is not tried again while its pods are unchanged
    assert [cluster.node_of(name) for name in odd] == [None, None]  # bound whole or not at all
    assert scheduler.stats.errors == 0
    bug["on"] = False
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{odd[0]}"
    touched = {"metadata": {"labels": {"touched": "yes"}}}
    cluster.api.request("PATCH", path, body=touched, content_type=MERGE_PATCH)
    assert wait_for("the gang bound once it changed", lambda: all(cluster.node_of(n) for n in odd))
