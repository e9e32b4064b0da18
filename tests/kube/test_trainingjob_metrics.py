"""The operator exports each TrainingJob's restarts, lost work and checkpoint age from the status it
writes (`jobstate.record_metrics`, as the embedded controller does), and drops them with the job."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import REGISTRY

from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from . import test_operator
from .fakeapi import FakeApiServer
from .test_operator import Clock, job_status, make_job, pods, set_phase, sync
from .test_scheduler import run

world = test_operator.world
JOB = {"namespace": "team-a", "trainingjob": "llm"}


def _value(name: str) -> float | None:
    return REGISTRY.get_sample_value(name, JOB)


def test_a_running_jobs_series_follow_its_status_and_go_with_it(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    binds = REGISTRY.get_sample_value("gpufleet_bind_duration_seconds_count") or 0.0
    make_job(api)
    sync(op)
    run(sched)
    sync(op)
    # The scheduler's two Binding writes are timed.
    assert REGISTRY.get_sample_value("gpufleet_bind_duration_seconds_count") == binds + 2
    for name in pods(api):
        set_phase(api, name, "Running")
    sync(op)
    status = job_status(api)
    assert status["phase"] == "Running"
    started = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00")).timestamp()
    assert _value("gpufleet_trainingjob_restarts") == 0
    assert _value("gpufleet_trainingjob_checkpoint_interval_seconds") == 600
    # No checkpoint taken since its workers started: its age counts from their start.
    assert _value("gpufleet_trainingjob_last_checkpoint_timestamp_seconds") == started

    evictions = {"queue": "team-a", "reason": "Error"}
    before = REGISTRY.get_sample_value("gpufleet_evictions_total", evictions) or 0.0
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    sync(op)
    assert job_status(api)["restarts"] == 1
    # The attempt's end is counted once, by the worker's reason, without the worker's name.
    assert REGISTRY.get_sample_value("gpufleet_evictions_total", evictions) == before + 1
    sync(op)
    assert REGISTRY.get_sample_value("gpufleet_evictions_total", evictions) == before + 1
    assert _value("gpufleet_trainingjob_restarts") == 1
    # Not running: no checkpoint age to alert on.
    assert _value("gpufleet_trainingjob_last_checkpoint_timestamp_seconds") is None

    api.request("DELETE", "/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs/llm")
    sync(op)
    assert _value("gpufleet_trainingjob_restarts") is None
    assert _value("gpufleet_trainingjob_lost_gpu_seconds") is None
