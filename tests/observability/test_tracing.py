"""Traces: one per workload, its steps in order across a preemption and a restart; a span per cycle;
nothing set up unless an OTLP endpoint is configured."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gpufleet.api import load_objects
from gpufleet.controllers.plane import build_manager
from gpufleet.observability import tracing
from gpufleet.observability.logs import context
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: low}
spec:
  priorityClass: research
  replicas: 1
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 300}
  restartPolicy: {backoffSeconds: 0}
  durationSeconds: 900
"""

HIGH = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: high}
spec:
  priorityClass: production-training
  replicas: 1
  worker: {gpus: 8}
  durationSeconds: 600
"""


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    assert tracing.configure(service="gpufleet-test", exporter=spans)
    yield spans
    tracing.shutdown()


def _steps(spans: tuple[ReadableSpan, ...], trace: str) -> list[str]:
    """The workload steps of one trace, in the order they were emitted."""
    return [
        s.name.removeprefix("workload.")
        for s in spans
        if s.name.startswith("workload.") and s.context is not None and f"{s.context.trace_id:032x}" == trace
    ]


def _preemption(path: Path) -> str:
    """Runs a twin of one node where `high` preempts `low`, which restarts from its checkpoint and
    finishes; returns the uid of low's Workload."""
    clock = VirtualClock()
    store = SqliteStore.open(path / "state.db", synchronous="OFF", clock=clock.datetime)
    twin = Twin(store, clock=clock)
    runtime = Runtime(store, clock=clock, participants=[twin, build_manager(store)])
    for obj in load_objects(FLEET):
        store.apply(obj)
    runtime.run_for(400)  # low runs and checkpoints at 300
    for obj in load_objects(HIGH):
        store.apply(obj)
    runtime.run_for(2000)  # high preempts low and finishes; low restarts from its checkpoint and finishes
    assert store.get("TrainingJob", "low").status.phase == "Succeeded"
    uid = store.get("Workload", "job-low").metadata.uid
    store.close()
    assert uid is not None
    return uid


def test_a_preempted_job_that_restarts_and_finishes_is_one_trace_in_order(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    uid = _preemption(tmp_path)

    spans = exporter.get_finished_spans()
    trace = tracing.trace_id(uid)
    steps = _steps(spans, trace)
    first_run = ["submitted", "queued", "admitted", "placed", "bound", "running"]
    assert steps[: len(first_run)] == first_run
    rest = steps[len(first_run) :]
    assert rest[0] == "checkpointed"
    again = ["preempted", "restarted", "queued", "admitted", "placed", "bound", "running"]
    assert [s for s in rest if s != "checkpointed"] == [*again, "finished"]
    assert set(steps) == set(tracing.STEPS)

    # The steps hang under the root span, emitted at the end with the ids derived from the uid.
    root = next(s for s in spans if s.name == "workload" and f"{s.context.trace_id:032x}" == trace)
    assert root.parent is None
    assert root.attributes is not None and root.attributes["gpufleet.phase"] == "Succeeded"
    children = [s for s in spans if s.context.trace_id == root.context.trace_id and s is not root]
    assert {s.parent.span_id for s in children if s.parent is not None} == {root.context.span_id}
    assert root.start_time is not None and root.end_time is not None
    assert (root.end_time - root.start_time) / 1e9 >= 900 + 600  # submission to its second run's end

    # The preemption names the preemptor and links to the cycle that decided it.
    preempted = next(s for s in spans if s.name == "workload.preempted")
    assert preempted.attributes is not None
    assert preempted.attributes["gpufleet.preemptor"] == "default/job-high"
    cycles = {s.context.span_id: s for s in spans if s.name == "scheduling.cycle"}
    assert [link.context.span_id in cycles for link in preempted.links] == [True]
    cycle = cycles[preempted.links[0].context.span_id]
    assert cycle.attributes is not None
    assert cycle.attributes["gpufleet.workloads.preempted"] == 1
    assert cycle.attributes["gpufleet.workloads.considered"] >= 1
    assert cycle.attributes["gpufleet.cycle.duration_seconds"] > 0

    # The other job has its own trace.
    assert len({s.context.trace_id for s in spans if s.name == "workload.submitted"}) == 2


def test_trace_ids_are_derived_from_the_uid_alone() -> None:
    assert tracing.trace_id("0f1e") == tracing.trace_id("0f1e")
    assert tracing.trace_id("0f1e") != tracing.trace_id("0f1f")
    assert len(tracing.trace_id("0f1e")) == 32


def test_nothing_is_set_up_without_an_endpoint() -> None:
    assert not tracing.configure(service="gpufleet-test", env={})
    assert not tracing.enabled()
    # The SDK's own switch wins over an endpoint.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    assert not tracing.configure(service="gpufleet-test", env=env)
    assert not tracing.enabled()
    tracing.step("some-uid", "queued", at=0.0)  # a no-op, not an error


def test_a_process_without_an_endpoint_never_loads_opentelemetry() -> None:
    """Off means off: the commands' modules import, and `configure` declines, without OpenTelemetry."""
    script = (
        "import sys\n"
        "import gpufleet.cli.main, gpufleet.controllers.plane, gpufleet.kube.scheduler\n"
        "from gpufleet.observability import tracing\n"
        "assert not tracing.configure(service='gpufleet-up', env={})\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_preemption_log_line_names_workload_queue_cycle_and_trace_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Tracing off: the line still carries the trace id the workload's trace would have."""
    with caplog.at_level(logging.INFO, logger="gpufleet.controllers.decisions"):
        uid = _preemption(tmp_path)
    (line,) = [r for r in caplog.records if r.getMessage().startswith("preempting for default/job-high")]
    fields = context(line)
    assert list(fields) == ["workload", "queue", "cycle", "trace_id"]
    assert fields["workload"] == "default/job-low" and fields["queue"] == "default"
    assert isinstance(fields["cycle"], int) and fields["trace_id"] == tracing.trace_id(uid)
