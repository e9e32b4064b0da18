"""Traces in the Kubernetes world: the operator and the scheduler, two processes that pass each other
nothing but API objects, write one trace per TrainingJob, every attempt of it included."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gpufleet.observability import tracing
from gpufleet.observability.logs import context

from .fakeapi import FakeApiServer
from .test_operator import JOBS, job_status, make_job, pods, set_phase, sync, world  # noqa: F401
from .test_scheduler import run


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    assert tracing.configure(service="gpufleet-test", exporter=spans)
    yield spans
    tracing.shutdown()


def _attempt(api: FakeApiServer, sched, attempt: int, phase: str = "Running") -> None:  # type: ignore[no-untyped-def]
    """The scheduler binds the attempt's workers; their kubelets report them `phase`."""
    run(sched)
    for name in pods(api):
        if name.startswith(f"llm-{attempt}-"):
            set_phase(api, name, phase)


def test_the_operator_and_the_scheduler_write_one_trace_across_a_restart(
    api: FakeApiServer,
    world,  # noqa: F811
    exporter: InMemorySpanExporter,
) -> None:
    op, sched, clock = world
    make_job(api)
    sync(op)
    _attempt(api, sched, 0)
    sync(op)
    assert job_status(api)["phase"] == "Running"
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    sync(op)
    clock.now += 31  # the backoff is over: attempt 1's workers are created
    sync(op)
    _attempt(api, sched, 1)
    sync(op)
    _attempt(api, sched, 1, "Succeeded")
    sync(op)
    assert job_status(api)["phase"] == "Succeeded"

    uid = api.objects[JOBS][("team-a", "llm")]["metadata"]["uid"]
    trace = int(tracing.trace_id(uid), 16)
    spans = exporter.get_finished_spans()
    steps = [s.name.removeprefix("workload.") for s in spans if s.context.trace_id == trace]
    attempt = ["admitted", "placed", "bound", "bound", "running"]
    assert steps == [
        "submitted",
        "queued",
        *attempt,
        "restarted",
        "queued",
        *attempt,
        "finished",
        "workload",
    ]
    services = {s.resource.attributes["service.name"] for s in spans}
    assert services == {"gpufleet-test"}
    restarted = next(s for s in spans if s.name == "workload.restarted")
    assert restarted.attributes is not None and "NCCL timeout" in str(restarted.attributes["gpufleet.reason"])
    bound = [s for s in spans if s.name == "workload.bound"]
    assert {s.attributes["gpufleet.workload"] for s in bound if s.attributes} == {
        "team-a/llm-0",
        "team-a/llm-1",
    }


def test_a_failed_bind_is_logged_with_the_workload_its_queue_node_and_trace_id(
    api: FakeApiServer,
    world,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    op, sched, _ = world
    make_job(api)
    sync(op)
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    api.fail_next(1)  # the first bind
    with caplog.at_level(logging.WARNING, logger="gpufleet.kube.scheduler"):
        sched.schedule_once()
    (line,) = [r for r in caplog.records if r.getMessage().startswith("binding ")]
    uid = api.objects[JOBS][("team-a", "llm")]["metadata"]["uid"]
    assert context(line) == {
        "workload": "team-a/llm-0",
        "queue": "team-a",
        "node": line.__dict__["node"],
        "trace_id": tracing.trace_id(uid),
    }
    assert line.__dict__["node"].startswith("gpu-")
