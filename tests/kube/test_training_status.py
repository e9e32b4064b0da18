"""The TrainingJob operator says what the embedded world says (`controllers.jobstate`): a finished job
does not claim to run, the disruption that exhausts maxRestarts is counted, phases are announced."""

from __future__ import annotations

from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.status import stamp

from . import test_operator
from .fakeapi import FakeApiServer
from .test_operator import Clock, job_status, make_job, pods, set_phase, sync
from .test_scheduler import run

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
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
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
