"""`gpufleet logs --kubeconfig ...`: a job's pods are found by the operator's labels, the newest
attempt's only, and each pod's log is read through the `pods/log` subresource."""

from __future__ import annotations

import pytest

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.kube import logs as kube_logs
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from .fakeapi import FakeApiServer
from .test_operator import Clock, make_job, pods, set_phase, sync
from .test_operator import world as world
from .test_scheduler import run


def test_a_jobs_log_is_its_current_attempts_pods_by_rank(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    make_job(api)
    sync(op)
    run(sched)
    assert kube_logs.pods_of(api, "team-a", "TrainingJob", "llm") == ["llm-0-0", "llm-0-1"]
    api.pod_logs[("team-a", "llm-0-1")] = ["rank 1 up", "step 100"]
    assert list(kube_logs.read(api, "team-a", "llm-0-1")) == ["rank 1 up", "step 100"]
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    sync(op)  # the attempt ends; the next one's pods come after the backoff
    op_clock = world[2]
    op_clock.now += 31
    sync(op)
    live = {n for n, p in pods(api).items() if not p["metadata"].get("deletionTimestamp")}
    assert kube_logs.pods_of(api, "team-a", "TrainingJob", "llm") == sorted(live) == ["llm-1-0", "llm-1-1"]


def test_missing_pods_and_kinds_without_logs_are_refused_by_name(api: FakeApiServer) -> None:
    with pytest.raises(NotFoundError, match="TrainingJob team-a/none"):
        kube_logs.pods_of(api, "team-a", "TrainingJob", "none")
    with pytest.raises(NotFoundError, match="pod team-a/gone"):
        list(kube_logs.read(api, "team-a", "gone"))
    with pytest.raises(ValidationError, match="no logs of a Queue"):
        kube_logs.pods_of(api, "team-a", "Queue", "q")
