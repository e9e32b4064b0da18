"""A Queue the scheduler leaves out says so on the API server: its Valid condition, an Event, its pods."""

from __future__ import annotations

from gpufleet.kube.config import KubeConfig
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


def queue_status(api: FakeApiServer, name: str) -> dict:
    return api.request("GET", f"{QUEUES}/{name}").get("status", {})


def status_patches(api: FakeApiServer) -> int:
    return sum(1 for method, path in api.requests if method == "PATCH" and path.startswith(QUEUES))


def test_queues_count_pending_and_admitted_pods_and_gpus_in_use(api: FakeApiServer) -> None:
    add_queues(api, "default", "team-a")
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    add_node(api, "gpu-1")
    # The first submitted takes the node's 8 GPUs; the two after it wait.
    add_pods(api, [pod("big", gpus=8, created="2026-11-29T10:00:00Z"), pod("b", gpus=4), pod("c", gpus=4)])
    run(sched)
    status = queue_status(api, "default")
    assert (status["pendingWorkloads"], status["admittedWorkloads"]) == (2, 1)
    assert status["usage"] == {"H100-80GB": 8}
    assert queue_status(api, "team-a")["pendingWorkloads"] == 0  # every column filled, zeros included

    patches = status_patches(api)
    run(sched)  # nothing changed: no PATCH
    assert status_patches(api) == patches

    api.request("DELETE", "/api/v1/namespaces/team-a/pods/big", body={"gracePeriodSeconds": 0})
    sched.pods.relist()
    sched.schedule_once()  # the two that waited take its place
    assert status_patches(api) == patches + 1
    sched.schedule_once()  # the informer has not shown that write yet: it is not sent again
    assert status_patches(api) == patches + 1
    run(sched)
    assert status_patches(api) == patches + 1
    status = queue_status(api, "default")
    assert (status["pendingWorkloads"], status["admittedWorkloads"]) == (0, 2)
    for name in ("b", "c"):
        api.request("DELETE", f"/api/v1/namespaces/team-a/pods/{name}", body={"gracePeriodSeconds": 0})
    run(sched)
    status = queue_status(api, "default")
    assert (status["admittedWorkloads"], status["usage"]) == (0, {})


def test_a_gang_missing_members_and_pods_of_an_invalid_queue_count_as_pending(api: FakeApiServer) -> None:
    add_queues(api, "default")
    add_queue(api, "orphan", {"parent": "nonexistent"})
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    add_node(api, "gpu-1")
    gang = {"gpufleet.io/gang": "llm", "gpufleet.io/gang-size": "3"}
    add_pods(
        api,
        [
            pod("llm-0", gpus=1, labels=gang),
            pod("llm-1", gpus=1, labels=gang),
            pod("stuck", gpus=1, labels={"gpufleet.io/queue": "orphan"}),
        ],
    )
    run(sched)
    assert queue_status(api, "default")["pendingWorkloads"] == 1  # one gang, two of its three pods
    orphan = queue_status(api, "orphan")
    assert (orphan["pendingWorkloads"], orphan["admittedWorkloads"]) == (1, 0)


def test_two_schedulers_each_count_their_own_queue_without_overwriting_the_other(
    api: FakeApiServer,
) -> None:
    add_queues(api, "team-x", "team-y")
    x, y = (
        KubeScheduler(api, config=KubeConfig(scheduler_name=n), clock=lambda: 1_900_000_000.0, bind_workers=0)
        for n in ("sched-x", "sched-y")
    )
    add_node(api, "gpu-1")
    add_pods(
        api,
        [
            pod("px", gpus=1, scheduler="sched-x", labels={"gpufleet.io/queue": "team-x"}),
            pod("py", gpus=1, scheduler="sched-y", labels={"gpufleet.io/queue": "team-y"}),
        ],
    )
    for _ in range(2):
        run(x)
        run(y)
    patches = status_patches(api)
    for _ in range(3):
        run(x)
        run(y)
    assert status_patches(api) == patches  # settled: neither keeps rewriting the other's queue
    assert queue_status(api, "team-x")["admittedWorkloads"] == 1
    assert queue_status(api, "team-y")["admittedWorkloads"] == 1
