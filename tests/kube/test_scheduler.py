"""The secondary scheduler against the in-memory API server: binds, gangs, topology, preemption, reasons."""

from __future__ import annotations

import json

import pytest

from gpufleet.api import ObjectMeta, Queue, QueueSpec
from gpufleet.api.queue import FlavorQuota
from gpufleet.kube.actions import Actions
from gpufleet.kube.config import KubeConfig, TopologyLevel
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer
from .fixtures import gang, node, pod

NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/team-a/pods"


def add_node(api: FakeApiServer, name: str, **kw) -> None:
    created = api.put(NODES, node(name, **kw))
    # Play the node lifecycle controller: a bare API server taints every new Node not-ready.
    taints = [t for t in created["spec"].get("taints", []) if t["key"] != "node.kubernetes.io/not-ready"]
    patch = {"spec": {"taints": taints or None}}
    api.request("PATCH", f"{NODES}/{name}", body=patch, content_type="application/merge-patch+json")


def add_pods(api: FakeApiServer, pods: list[dict]) -> None:
    for p in pods:
        api.put(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)


def run(sched: KubeScheduler):
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    return sched.schedule_once()


def bound(api: FakeApiServer, ns: str = "team-a") -> dict[str, str]:
    return {
        name: p["spec"]["nodeName"]
        for (n, name), p in api.objects.get("/v1/pods", {}).items()
        if n == ns and p["spec"].get("nodeName")
    }


def condition(api: FakeApiServer, name: str, kind: str, ns: str = "team-a") -> dict | None:
    p = api.objects["/v1/pods"][(ns, name)]
    return next((c for c in p["status"].get("conditions", []) if c["type"] == kind), None)


def events(api: FakeApiServer, reason: str) -> list[dict]:
    return [e for (_, _), e in api.objects.get("/v1/events", {}).items() if e["reason"] == reason]


def add_queues(api: FakeApiServer, *names: str, gpus: int = 1000) -> None:
    store = KubeStore(api)
    for name in names:
        quota = {"H100-80GB": FlavorQuota(nominal=gpus)}
        store.create(Queue(metadata=ObjectMeta(name=name), spec=QueueSpec(quotas=quota)))


@pytest.fixture
def sched(api: FakeApiServer) -> KubeScheduler:
    add_queues(api, "default", "team-a")
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


def test_a_pod_is_bound_with_its_gpus_noted(api: FakeApiServer, sched: KubeScheduler) -> None:
    add_node(api, "gpu-1")
    add_pods(api, [pod("p", gpus=2), pod("theirs", scheduler="default-scheduler")])
    run(sched)
    assert bound(api) == {"p": "gpu-1"}
    noted = json.loads(
        api.objects["/v1/pods"][("team-a", "p")]["metadata"]["annotations"]["gpufleet.io/gpus"]
    )
    assert len(noted["gpus"]) == 2 and noted["milli"] == 1000
    assert condition(api, "p", "PodScheduled")["status"] == "True"


def test_a_gang_binds_only_when_every_member_fits(api: FakeApiServer, sched: KubeScheduler) -> None:
    for i in range(3):
        add_node(api, f"gpu-{i}")
    add_pods(api, gang("llm", 4))
    run(sched)
    assert bound(api) == {}
    why = condition(api, "llm-0", "PodScheduled")
    assert (
        why["status"] == "False" and why["reason"] == "Unschedulable" and why["message"].startswith("NoFit")
    )
    assert len(events(api, "FailedScheduling")) == 4
    run(sched)
    assert len(events(api, "FailedScheduling")) == 4  # the same reason is not said twice
    add_node(api, "gpu-3")
    run(sched)
    assert sorted(bound(api).values()) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_an_incomplete_gang_waits_for_its_members(api: FakeApiServer, sched: KubeScheduler) -> None:
    add_node(api, "gpu-1")
    add_pods(api, gang("llm", 3, gpus=1)[:2])
    run(sched)
    assert bound(api) == {}
    assert condition(api, "llm-0", "PodScheduled")["message"].startswith("WaitingForGangMembers: 2 of 3")


def test_required_topology_keeps_a_gang_in_one_rack(api: FakeApiServer, sched: KubeScheduler) -> None:
    for i, rack in enumerate(["r1", "r2", "r2", "r1"]):
        add_node(api, f"gpu-{i}", labels={"gpufleet.io/rack": rack})
    add_pods(api, [pod("filler", gpus=8, node_name="gpu-0", scheduler="default-scheduler", phase="Running")])
    add_pods(api, gang("llm", 2, annotations={"gpufleet.io/topology-required": "rack"}))
    run(sched)
    assert sorted(v for k, v in bound(api).items() if k.startswith("llm")) == ["gpu-1", "gpu-2"]


def test_taints_are_honoured_unless_tolerated(api: FakeApiServer, sched: KubeScheduler) -> None:
    api.put(NODES, node("fresh"))  # keeps the bare API server's not-ready taint
    add_pods(api, [pod("plain")])
    run(sched)
    assert bound(api) == {}
    tolerant = pod(
        "tolerant",
        tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}],
    )
    add_pods(api, [tolerant])
    run(sched)
    assert bound(api) == {"tolerant": "fresh"}


def test_capacity_of_other_schedulers_pods_is_respected(api: FakeApiServer, sched: KubeScheduler) -> None:
    add_node(api, "gpu-1")
    add_pods(api, [pod("theirs", gpus=6, node_name="gpu-1", scheduler="default-scheduler", phase="Running")])
    add_pods(api, [pod("big", gpus=4), pod("small", gpus=2)])
    run(sched)
    assert bound(api) == {"theirs": "gpu-1", "small": "gpu-1"}


def test_preemption_evicts_through_the_eviction_api_and_the_preemptor_follows(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, "gpu-1")
    add_pods(api, gang("low", 2, gpus=4, annotations={}, priority=100))
    run(sched)
    assert set(bound(api)) == {"low-0", "low-1"}
    add_pods(
        api,
        [
            pod(
                "urgent",
                gpus=8,
                priority=10_000,
                labels={"gpufleet.io/queue": "team-a"},
                created="2026-11-29T11:30:00Z",
            )
        ],
    )
    run(sched)
    victims = [api.objects["/v1/pods"][("team-a", f"low-{i}")] for i in range(2)]
    assert all(v["metadata"].get("deletionTimestamp") for v in victims)  # graceful: still there
    target = condition(api, "low-0", "DisruptionTarget")
    assert target["status"] == "True" and target["reason"] == "Preempted"
    assert len(events(api, "Preempted")) == 2
    assert condition(api, "urgent", "PodScheduled")["message"].startswith("WaitingForPreemption")
    run(sched)
    assert "urgent" not in bound(api)  # the victims still hold the GPUs while they terminate
    for i in range(2):  # the kubelet's part: the containers stopped
        api.request("DELETE", f"{PODS}/low-{i}", body={"gracePeriodSeconds": 0})
    run(sched)
    assert bound(api) == {"urgent": "gpu-1"}


def test_an_eviction_a_budget_forbids_is_retried(
    api: FakeApiServer, sched: KubeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_node(api, "gpu-1")
    add_pods(api, [pod("low", gpus=8, priority=1)])
    run(sched)
    api.blocked_evictions.add(("team-a", "low"))
    asked: list[str] = []
    evict = Actions.evict

    def counted(actions: Actions, victim: dict, **kw: str) -> bool:
        asked.append(victim["metadata"]["name"])
        return evict(actions, victim, **kw)

    monkeypatch.setattr(Actions, "evict", counted)
    add_pods(api, [pod("high", gpus=8, priority=1000, created="2026-11-29T11:30:00Z")])
    run(sched)
    assert not api.objects["/v1/pods"][("team-a", "low")]["metadata"].get("deletionTimestamp")
    assert asked == ["low"]  # once a pass, not once a cycle: the budget would refuse it again
    why = condition(api, "high", "PodScheduled")["message"]
    assert why.startswith("WaitingForPreemption") and "refused" in why, why
    api.blocked_evictions.clear()
    run(sched)
    assert api.objects["/v1/pods"][("team-a", "low")]["metadata"].get("deletionTimestamp")


def test_a_restarted_scheduler_sees_the_same_allocations(api: FakeApiServer) -> None:
    add_queues(api, "default")
    add_node(api, "gpu-1")
    add_pods(api, [pod("a", gpus=3), pod("b", gpus=3)])
    run(KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0))
    add_pods(api, [pod("c", gpus=3)])
    fresh = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    run(fresh)
    assert set(bound(api)) == {"a", "b"}
    assert condition(api, "c", "PodScheduled")["message"].startswith("NoFit")


def test_custom_topology_levels(api: FakeApiServer) -> None:
    config = KubeConfig(topology_levels=(TopologyLevel("pod", "example.com/pod"),), nvlink_level=None)
    sched = KubeScheduler(api, config=config, clock=lambda: 1_900_000_000.0, bind_workers=0)
    add_queues(api, "team-a")
    add_node(api, "a", labels={"example.com/pod": "p1"})
    add_node(api, "b", labels={"example.com/pod": "p2"})
    add_node(api, "c", labels={"example.com/pod": "p2"})
    add_pods(api, gang("g", 2, annotations={"gpufleet.io/topology-required": "pod"}))
    run(sched)
    assert sorted(bound(api).values()) == ["b", "c"]


def test_draining_a_node_evicts_one_borrowed_gang_for_all_its_replicas(api: FakeApiServer) -> None:
    # Found on a real API server: team-b borrows every GPU with two 8-GPU gangs; a drain moves three
    # 1-GPU replicas of team-a (within its nominal quota). One gang frees room for all three: the other
    # replicas wait for its pods to terminate instead of evicting the second gang.
    store = KubeStore(api)
    store.create(Queue(metadata=ObjectMeta(name="org"), spec=QueueSpec()))
    for name, gpus in (("team-a", 24), ("team-b", 0)):
        quota = {"H100-80GB": FlavorQuota(nominal=gpus)}
        store.create(Queue(metadata=ObjectMeta(name=name), spec=QueueSpec(parent="org", quotas=quota)))
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    for name in ("a", "b", "c"):
        add_node(api, name)
    for gang_name, node_name in (("g1", "a"), ("g2", "b")):
        add_pods(api, gang(gang_name, 2, gpus=4, queue="team-b", namespace="team-b", priority=10_000,
                           node_name=node_name, phase="Running"))  # fmt: skip
    replica = {"gpus": 1, "priority": 100_000, "labels": {"gpufleet.io/queue": "team-a"}}
    add_pods(api, [pod(f"old-{i}", node_name="c", phase="Running", **replica) for i in range(3)])
    run(sched)
    # The drain: node c is cordoned, its replicas deleted (they terminate), new ones are created.
    api.request("PATCH", f"{NODES}/c", body={"spec": {"unschedulable": True}},
                content_type="application/merge-patch+json")  # fmt: skip
    for i in range(3):
        api.request("DELETE", f"{PODS}/old-{i}")
    add_pods(api, [pod(f"new-{i}", created=f"2026-11-29T11:3{i}:00Z", **replica) for i in range(3)])

    def terminating(ns: str) -> set[str]:
        return {name for (n, name), p in api.objects["/v1/pods"].items()
                if n == ns and p["metadata"].get("deletionTimestamp")}  # fmt: skip

    for _ in range(3):  # the victims take their time: nothing else is evicted, nothing lands on them
        run(sched)
        assert terminating("team-b") in ({"g1-0", "g1-1"}, {"g2-0", "g2-1"})
        assert not set(bound(api)) & {"new-0", "new-1", "new-2"}
        for i in range(3):
            why = condition(api, f"new-{i}", "PodScheduled")["message"]
            assert why.startswith("WaitingForPreemption"), why
    victims = sorted(terminating("team-b"))
    freed = bound(api, "team-b")[victims[0]]
    for victim in victims:  # the kubelet's part: the containers stopped
        api.request("DELETE", f"/api/v1/namespaces/team-b/pods/{victim}", body={"gracePeriodSeconds": 0})
    run(sched)
    assert {bound(api).get(f"new-{i}") for i in range(3)} == {freed}
    kept = {"g1-0", "g1-1", "g2-0", "g2-1"} - set(victims)
    assert set(bound(api, "team-b")) == kept and not terminating("team-b")


def test_a_pod_with_an_impossible_quantity_waits_alone_and_says_why(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, "gpu-1")
    bad = pod("huge", gpus=1)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e5000"
    add_pods(api, [bad, pod("fine", gpus=1)])
    run(sched)
    assert bound(api) == {"fine": "gpu-1"}  # the other tenant's pod is scheduled all the same
    why = condition(api, "huge", "PodScheduled")
    assert why["status"] == "False" and why["message"].startswith("InvalidRequest")
    assert "team-a/huge: cpu" in why["message"] and "largest quantity allowed" in why["message"]
