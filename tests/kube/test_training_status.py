"""The TrainingJob operator says what the embedded world says (`controllers.jobstate`): a finished job
does not claim to run, the disruption that exhausts maxRestarts is counted, phases are announced."""

from __future__ import annotations

import pytest

from gpufleet.api.training import TrainingJob
from gpufleet.kube.config import QUEUE_LABEL
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.status import stamp
from gpufleet.kube.store import KubeStore

from . import test_operator
from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_operator import Clock, job_status, make_job, pods, set_phase, sync
from .test_scheduler import PODS, add_node, add_queues, run

world = test_operator.world  # the same operator, scheduler and clock over four nodes in one rack


def events(api: FakeApiServer) -> list[tuple[str, str, str]]:
    return [
        (e["reason"], e["message"], e["type"])
        for (ns, _), e in api.objects.get("/v1/events", {}).items()
        if ns == "team-a" and e["involvedObject"]["kind"] == "TrainingJob"
    ]


def condition(status: dict, kind: str) -> tuple[str, str]:
    found = next(c for c in status["conditions"] if c["type"] == kind)
    return found["status"], found["reason"]


def test_a_job_whose_workers_all_finish_succeeds_and_no_longer_says_it_runs(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    make_job(api)
    sync(op)
    run(sched)
    sync(op)
    for name in pods(api):
        set_phase(api, name, "Running")
    sync(op)
    running = job_status(api)
    assert running["phase"] == "Running" and condition(running, "Admitted") == ("True", "Admitted")
    assert running["admittedTime"] and running["startTime"]
    for name in pods(api):
        set_phase(api, name, "Succeeded")
    sync(op)
    done = job_status(api)
    assert done["phase"] == "Succeeded" and done["completionTime"] and done["readyReplicas"] == 0
    assert condition(done, "Succeeded") == ("True", "Completed")
    assert condition(done, "Running") == ("False", "Completed")
    phases = [message for reason, message, _ in events(api) if reason != "Restarting"]
    assert phases == ["Pending -> Admitted", "Admitted -> Running", "Running -> Succeeded"]


def test_a_restart_waits_out_its_backoff_and_giving_up_counts_the_last_disruption(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, clock = world
    make_job(api, max_restarts=1)
    sync(op)
    run(sched)
    # Started by its kubelet and failing at once: no work lost, none said.
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout", startTime=stamp(clock.now))
    sync(op)
    waiting = job_status(api)
    assert waiting["phase"] == "Pending" and waiting["restarts"] == 1
    assert waiting["pendingReason"]["type"] == "Backoff" and condition(waiting, "Running")[1] == "Backoff"
    assert ("Restarting", "restart 1 from the start after llm-0-0 Error: NCCL timeout", "Warning") in events(
        api
    )
    clock.now += 31
    sync(op)
    assert job_status(api)["pendingReason"]["type"] == "Queued"  # the backoff is over
    run(sched)
    sync(op)
    assert job_status(api)["phase"] == "Admitted" and "pendingReason" not in job_status(api)
    set_phase(api, "llm-1-1", "Failed", reason="Error", message="OOM")
    sync(op)
    failed = job_status(api)
    assert failed["phase"] == "Failed" and failed["restarts"] == 2  # as in the embedded world
    message = next(c["message"] for c in failed["conditions"] if c["type"] == "Failed")
    assert "llm-1-1 Error: OOM" in message
    assert condition(failed, "Running") == ("False", "Failed")
    assert not [n for n in pods(api) if n.startswith("llm-2-")]


def test_a_backoff_begun_by_an_earlier_operator_is_still_waited_out(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, _, clock = world
    make_job(api)  # backoffSeconds 30
    restarting = {"type": "Running", "status": "False", "reason": "Restarting", "message": "llm-0-0 Error",
                  "lastTransitionTime": stamp(clock.now)}  # fmt: skip
    body = {"status": {"phase": "Pending", "restarts": 1, "conditions": [restarting]}}
    path = "/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs/llm/status"
    api.request("PATCH", path, body=body, content_type="application/merge-patch+json")
    clock.now += 10
    sync(op)
    assert pods(api) == {}
    clock.now += 21
    sync(op)
    assert set(pods(api)) == {"llm-1-0", "llm-1-1"}


def remove_pod(api: FakeApiServer, name: str) -> None:
    """The pod is gone for good (its kubelet confirmed the deletion)."""
    options = {"gracePeriodSeconds": 0}
    api.request("DELETE", f"{PODS}/{name}", body=options, query=options)


def start_blocker(api: FakeApiServer, sched: KubeScheduler, name: str) -> None:
    """An 8-GPU pod of queue team-a, bound: with a 16-GPU quota the job's 2x8 GPUs no longer fit."""
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    api.put(PODS, pod(name, gpus=8, labels={QUEUE_LABEL: "team-a"}, tolerations=tolerations))
    run(sched)


@pytest.mark.parametrize("ended_by", ["this operator", "an earlier operator"])
def test_a_restarted_job_waiting_for_quota_says_so_as_its_first_attempt_did(
    api: FakeApiServer, ended_by: str
) -> None:
    add_queues(api, "team-a", gpus=16)
    for i in range(4):
        add_node(api, f"gpu-{i}", labels={"gpufleet.io/rack": "r1"})
    clock = Clock()
    op, sched = Operator(api, clock=clock), KubeScheduler(api, clock=clock, bind_workers=0)
    start_blocker(api, sched, "blocker-1")
    make_job(api)
    sync(op)
    run(sched)
    sync(op)
    first = job_status(api)
    assert first["pendingReason"]["type"] == "QuotaExceeded"
    assert condition(first, "Running") == ("False", "QuotaExceeded")  # as in the embedded world
    remove_pod(api, "blocker-1")
    run(sched)
    sync(op)
    for name in pods(api):
        set_phase(api, name, "Running")
    sync(op)
    assert job_status(api)["phase"] == "Running"
    if ended_by == "this operator":
        set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
        sync(op)
    else:  # what operators before the shared status wrote when they ended an attempt
        restarting = {"type": "Running", "status": "False", "reason": "Restarting",
                      "message": "llm-0-0 Error", "lastTransitionTime": stamp(clock.now)}  # fmt: skip
        backoff = {"type": "Backoff", "message": "llm-0-0 Error; requeued after 30s"}
        admitted = [c for c in job_status(api)["conditions"] if c["type"] == "Admitted"]
        body = {"status": {"phase": "Pending", "restarts": 1, "pendingReason": backoff,
                           "conditions": [*admitted, restarting]}}  # fmt: skip
        path = "/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs/llm/status"
        api.request("PATCH", path, body=body, content_type="application/merge-patch+json")
    for name in pods(api):
        remove_pod(api, name)
    start_blocker(api, sched, "blocker-2")  # the same quota shortage as the first attempt's
    clock.now += 31
    sync(op)
    assert set(pods(api)) == {"blocker-2", "llm-1-0", "llm-1-1"}
    assert job_status(api)["pendingReason"]["type"] == "Queued"  # the backoff is over
    for _ in range(2):
        run(sched)
        sync(op)
    waiting = job_status(api)
    assert waiting["phase"] == "Pending" and waiting["pendingReason"] == first["pendingReason"]
    assert condition(waiting, "Running") == ("False", "QuotaExceeded")
    assert condition(waiting, "Admitted") == ("False", "QuotaExceeded")  # attempt 0's capacity is gone


def make_elastic_job(api: FakeApiServer, *, replicas: int, min_replicas: int) -> None:
    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "llm", "namespace": "team-a"},
            "spec": {
                "queue": "team-a",
                "replicas": replicas,
                "minReplicas": min_replicas,
                "worker": {
                    "gpus": 8,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "template": {"spec": {"containers": [{"name": "train", "image": "trainer:1"}]}},
                },
            },
        }
    )
    KubeStore(api).create(job)


def test_an_elastic_job_runs_and_succeeds_with_the_workers_it_was_admitted(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world  # four 8-GPU nodes: 4 of the 6 workers fit
    make_elastic_job(api, replicas=6, min_replicas=2)
    sync(op)
    run(sched)
    sync(op)
    bound = sorted(n for n, p in pods(api).items() if p["spec"].get("nodeName"))
    assert len(bound) == 4
    assert job_status(api)["phase"] == "Admitted" and job_status(api)["replicas"] == 4
    for name in bound:
        set_phase(api, name, "Running")
    sync(op)
    run(sched)  # the two left over still wait; the job is not pending for them
    sync(op)
    running = job_status(api)
    assert (running["phase"], running["readyReplicas"]) == ("Running", 4) and "pendingReason" not in running
    for name in bound:
        set_phase(api, name, "Succeeded")
    sync(op)
    done = job_status(api)
    assert done["phase"] == "Succeeded" and condition(done, "Succeeded") == ("True", "Completed")
    assert {n for n, p in pods(api).items() if not p["metadata"].get("deletionTimestamp")} == set(bound)
    run(sched)
    sync(op)
    assert job_status(api)["phase"] == "Succeeded"
    phases = [message for reason, message, _ in events(api)]
    assert phases == ["Pending -> Admitted", "Admitted -> Running", "Running -> Succeeded"]


def test_workers_finishing_one_by_one_leave_the_job_running_until_the_last(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    make_job(api, replicas=3)
    sync(op)
    run(sched)
    sync(op)
    for name in pods(api):
        set_phase(api, name, "Running")
    sync(op)
    for rank in range(3):
        set_phase(api, f"llm-0-{rank}", "Succeeded")
        sync(op)
    assert job_status(api)["phase"] == "Succeeded"
    phases = [message for reason, message, _ in events(api)]
    assert phases == ["Pending -> Admitted", "Admitted -> Running", "Running -> Succeeded"]


def test_a_restarting_job_is_no_longer_admitted(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, clock = world
    make_job(api)
    sync(op)
    run(sched)
    sync(op)
    assert condition(job_status(api), "Admitted") == ("True", "Admitted")
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    sync(op)
    assert condition(job_status(api), "Admitted") == ("False", "Backoff")
    clock.now += 31
    sync(op)
    assert condition(job_status(api), "Admitted") == ("False", "Queued")
    run(sched)
    sync(op)
    readmitted = job_status(api)
    assert readmitted["phase"] == "Admitted" and condition(readmitted, "Admitted") == ("True", "Admitted")


def test_a_suspended_job_releases_its_nodes_and_resumes_as_a_new_attempt(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, clock = world
    make_job(api)
    sync(op)
    run(sched)
    sync(op)
    for name in pods(api):
        set_phase(api, name, "Running", startTime=stamp(clock.now))
    sync(op)
    running = job_status(api)
    assert running["phase"] == "Running" and len(running["nodes"]) == 2  # the NODES column
    clock.now += 120
    raw = api.objects[test_operator.JOBS][("team-a", "llm")]
    raw["spec"]["suspend"] = True
    sync(op)
    suspended = job_status(api)
    assert suspended["phase"] == "Suspended" and condition(suspended, "Suspended") == ("True", "Suspended")
    assert suspended["restarts"] == 1 and suspended["lostGpuSeconds"] == 2 * 8 * 120
    live = lambda: {n for n, p in pods(api).items() if not p["metadata"].get("deletionTimestamp")}  # noqa: E731
    assert suspended["nodes"] == [] and live() == set()
    sync(op)  # while suspended nothing is created again
    assert live() == set() and job_status(api)["restarts"] == 1
    api.objects[test_operator.JOBS][("team-a", "llm")]["spec"]["suspend"] = False
    sync(op)
    resumed = job_status(api)
    assert resumed["phase"] == "Pending" and condition(resumed, "Suspended") == ("False", "Resumed")
    assert live() == {"llm-1-0", "llm-1-1"}
    run(sched)
    sync(op)
    assert job_status(api)["phase"] == "Admitted"
