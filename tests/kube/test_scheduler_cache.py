"""The scheduler's incremental cache: kept across passes, partial gangs completed, binds retried."""

from __future__ import annotations

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import Queue, QueueSpec
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer
from .fixtures import gang, pod
from .test_scheduler import PODS, add_node, add_pods, add_queues, bound, condition, run


def make(api: FakeApiServer) -> KubeScheduler:
    add_queues(api, "default", "team-a")
    return KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)


def test_the_cache_is_kept_between_passes_and_follows_changes(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_pods(api, [pod("a", gpus=4)])
    run(sched)
    cache = sched.kcache.cache
    add_pods(api, [pod("b", gpus=4), pod("c", gpus=4)])
    run(sched)
    assert sched.kcache.cache is cache and sched.kcache.rebuilds == 1
    assert set(bound(api)) == {"a", "b"}
    assert condition(api, "c", "PodScheduled")["message"].startswith("NoFit")
    api.request("DELETE", f"{PODS}/a", body={"gracePeriodSeconds": 0})  # a finished and was removed
    run(sched)
    assert set(bound(api)) == {"b", "c"}
    assert sched.kcache.rebuilds == 1


def test_a_queue_change_rebuilds_and_keeps_history(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_pods(api, [pod("a", gpus=4)])
    run(sched)
    history = sched.kcache.cache.history
    add_queues(api, "team-b")
    run(sched)
    assert sched.kcache.rebuilds == 2 and sched.kcache.cache.history is history
    assert "team-a/a" in sched.kcache.cache.admitted  # accounted again from its bound pod


def test_a_partly_bound_gang_is_completed_inside_its_required_rack(api: FakeApiServer) -> None:
    sched = make(api)
    for i, rack in enumerate(["r1", "r2", "r1", "r2"]):
        add_node(api, f"gpu-{i}", labels={"gpufleet.io/rack": rack})
    members = gang("llm", 3, annotations={"gpufleet.io/topology-required": "rack"}, gpus=4)
    members[0]["spec"]["nodeName"] = "gpu-1"  # bound before this scheduler started (or by hand)
    add_pods(api, members)
    run(sched)
    placed = bound(api)
    assert set(placed) == {"llm-0", "llm-1", "llm-2"}
    assert set(placed.values()) <= {"gpu-1", "gpu-3"}  # rack r2, where llm-0 already is
    run(sched)  # the whole gang is one admitted workload again
    assert "team-a/llm" in sched.kcache.cache.admitted
    assert not any(name.endswith("#rest") for name in sched.kcache.cache.pending)


def test_a_binding_that_failed_transiently_is_retried_on_the_same_node(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    add_pods(api, gang("g", 2, gpus=8))
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    api.fail_next(1)  # the first member's annotation write fails
    sched.schedule_once()
    first = bound(api)
    assert len(first) == 1
    run(sched)
    assert set(bound(api)) == {"g-0", "g-1"} and bound(api).items() >= first.items()


def job(name: str, *, parallelism: int, completions: int | None, gang: bool) -> dict:
    annotations = {"gpufleet.io/gang-scheduling": "true"} if gang else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "annotations": annotations},
        "spec": {"parallelism": parallelism, "completions": completions, "template": {"spec": {}}},
    }


def job_pod(job_name: str, index: int) -> dict:
    p = pod(f"{job_name}-{index}", gpus=8, labels={"gpufleet.io/queue": "team-a", "job-name": job_name})
    p["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job_name,
            "uid": f"uid-{job_name}",
            "controller": True,
        }
    ]
    return p


def test_a_job_that_asks_for_it_is_one_gang_of_its_parallelism(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    api.put("/apis/batch/v1/namespaces/team-a/jobs", job("train", parallelism=3, completions=6, gang=True))
    add_pods(api, [job_pod("train", 0), job_pod("train", 1)])
    run(sched)
    assert bound(api) == {}
    assert condition(api, "train-0", "PodScheduled")["message"].startswith("WaitingForGangMembers: 2 of 3")
    add_node(api, "gpu-3")
    add_pods(api, [job_pod("train", 2)])
    run(sched)
    assert set(bound(api)) == {"train-0", "train-1", "train-2"}


def test_a_job_that_does_not_ask_schedules_its_pods_one_by_one(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    api.put(
        "/apis/batch/v1/namespaces/team-a/jobs", job("plain", parallelism=2, completions=None, gang=False)
    )
    add_pods(api, [job_pod("plain", 0), job_pod("plain", 1)])
    run(sched)
    assert len(bound(api)) == 1


def test_completions_below_parallelism_size_the_gang(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    api.put("/apis/batch/v1/namespaces/team-a/jobs", job("short", parallelism=4, completions=2, gang=True))
    add_pods(api, [job_pod("short", 0), job_pod("short", 1)])
    run(sched)
    assert set(bound(api)) == {"short-0", "short-1"}


def test_a_preemptor_waits_for_its_victims_without_taking_more(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_node(api, "gpu-2")
    add_pods(api, [pod("low-1", gpus=8, priority=1), pod("low-2", gpus=8, priority=1)])
    run(sched)
    add_pods(api, [pod("high", gpus=8, priority=1000, created="2026-11-29T11:30:00Z")])
    run(sched)
    run(sched)
    run(sched)
    leaving = [
        n
        for n in ("low-1", "low-2")
        if api.objects["/v1/pods"][("team-a", n)]["metadata"].get("deletionTimestamp")
    ]
    assert len(leaving) == 1
    assert condition(api, "high", "PodScheduled")["message"].startswith("WaitingForPreemption")
    api.request("DELETE", f"{PODS}/{leaving[0]}", body={"gracePeriodSeconds": 0})
    run(sched)
    assert bound(api)["high"] in {"gpu-1", "gpu-2"}


def test_a_queue_with_an_unknown_parent_is_left_out_and_the_rest_is_scheduled(api: FakeApiServer) -> None:
    sched = make(api)
    KubeStore(api).create(Queue(metadata=ObjectMeta(name="qbad"), spec=QueueSpec(parent="nonexistent")))
    add_node(api, "gpu-1")
    add_pods(api, [pod("a", gpus=4)])
    run(sched)
    assert set(bound(api)) == {"a"}
    assert "qbad" in sched.kcache.invalid_queues


def test_a_capped_refresh_takes_in_some_new_pending_pods_and_every_bound_one(api: FakeApiServer) -> None:
    sched = make(api)
    add_node(api, "gpu-1")
    add_pods(api, [pod(f"p{i}", gpus=1) for i in range(5)])
    add_pods(api, [pod("held", gpus=2, node_name="gpu-1")])
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    cache = sched.kcache.refresh(sched._sources(), now=1_900_000_000.0, new_pods=2)
    assert sorted(cache.pending) == ["team-a/p0", "team-a/p1"] and sched.kcache.behind
    assert "team-a/held" in cache.admitted  # capacity held is never put off
    cache = sched.kcache.refresh(sched._sources(), now=1_900_000_000.0, new_pods=2)
    assert len(cache.pending) == 4
    cache = sched.kcache.refresh(sched._sources(), now=1_900_000_000.0)
    assert len(cache.pending) == 5 and not sched.kcache.behind
