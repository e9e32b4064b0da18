"""A Queue the scheduler leaves out says so on the API server: its Valid condition, an Event, its pods."""

from __future__ import annotations

from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.transport import MERGE_PATCH

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import add_node, add_pods, add_queues, condition, events, run

QUEUES = "/apis/gpufleet.io/v1alpha1/queues"


def valid(api: FakeApiServer, name: str) -> dict | None:
    queue = api.request("GET", f"{QUEUES}/{name}")
    return next((c for c in queue.get("status", {}).get("conditions", []) if c["type"] == "Valid"), None)


def add_queue(api: FakeApiServer, name: str, spec: dict) -> None:
    api.request("POST", QUEUES, body={"metadata": {"name": name}, "spec": spec})


def test_bad_queues_are_marked_invalid_with_an_event_and_their_pods_say_why(api: FakeApiServer) -> None:
    add_queues(api, "default", "team-a")
    add_queue(api, "orphan", {"parent": "nonexistent"})
    # The CRD's schema lets this through; the API's own validation does not.
    add_queue(api, "greedy", {"quotas": {"H100-80GB": {"nominal": 1, "lendingLimit": 5}}})
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    add_node(api, "gpu-1")
    labels = {"gpufleet.io/queue": "orphan"}
    add_pods(
        api,
        [
            pod("a", gpus=1),
            pod("b", gpus=1, labels=labels),
            pod("c", gpus=1, labels={"gpufleet.io/queue": "greedy"}),
        ],
    )
    run(sched)

    assert valid(api, "team-a")["status"] == "True" and valid(api, "team-a")["reason"] == "InQuotaTree"
    orphan = valid(api, "orphan")
    assert orphan["status"] == "False" and orphan["reason"] == "InvalidParent"
    assert "unknown parent queue 'nonexistent'" in orphan["message"]
    greedy = valid(api, "greedy")
    assert greedy["status"] == "False" and greedy["reason"] == "InvalidSpec"
    assert "lendingLimit" in greedy["message"], greedy["message"]

    warned = {e["involvedObject"]["name"]: e for e in events(api, "InvalidQueue")}
    assert set(warned) == {"orphan", "greedy"} and warned["orphan"]["type"] == "Warning"
    assert "namespace" not in warned["orphan"]["involvedObject"]  # a cluster-scoped object

    assert condition(api, "a", "PodScheduled")["status"] == "True"
    assert condition(api, "b", "PodScheduled")["message"].startswith("QueueInvalid: queue 'orphan'")
    assert condition(api, "c", "PodScheduled")["message"].startswith("QueueInvalid: queue 'greedy'")

    run(sched)  # nothing changed: no second Event
    assert len(events(api, "InvalidQueue")) == 2


def test_a_queue_that_is_fixed_becomes_valid_and_its_pods_are_scheduled(api: FakeApiServer) -> None:
    add_queues(api, "default")
    add_queue(api, "team-b", {"parent": "later", "quotas": {"H100-80GB": {"nominal": 8}}})
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    add_node(api, "gpu-1")
    add_pods(api, [pod("p", gpus=1, labels={"gpufleet.io/queue": "team-b"})])
    run(sched)
    assert valid(api, "team-b")["status"] == "False"
    api.request("PATCH", f"{QUEUES}/team-b", body={"spec": {"parent": None}}, content_type=MERGE_PATCH)
    run(sched)
    assert valid(api, "team-b")["status"] == "True"
    assert condition(api, "p", "PodScheduled")["status"] == "True"
