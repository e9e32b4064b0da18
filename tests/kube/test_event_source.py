"""Events name who wrote them: the operator's say `gpufleet-operator`, the scheduler's
`gpufleet-scheduler` (`kubectl get events` shows it as the source; tools filter on it)."""

from __future__ import annotations

from gpufleet.kube.fleet import INTERRUPTION_ANNOTATION
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from . import test_fleet as fleet
from . import test_operator as training
from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_scheduler import add_node, add_pods, add_queues, run


def sources(api: FakeApiServer, reason: str) -> set[tuple[str, str]]:
    """(source.component, reportingComponent) of the Events with `reason`."""
    found = [e for e in api.objects.get("/v1/events", {}).values() if e["reason"] == reason]
    assert found, f"no {reason} Event"
    return {(e["source"]["component"], e["reportingComponent"]) for e in found}


def test_a_training_job_s_events_come_from_the_operator(api: FakeApiServer) -> None:
    op = Operator(api, clock=training.Clock(), nodes=False)
    training.make_job(api)
    training.sync(op)
    training.set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    training.sync(op)
    assert sources(api, "Restarting") == {("gpufleet-operator", "gpufleet-operator")}


def test_a_spot_drain_s_events_come_from_the_operator(api: FakeApiServer) -> None:
    op = Operator(api, clock=training.Clock())
    add_node(api, "spot-1")
    fleet.place(api, "worker", "spot-1")
    fleet.annotate(api, "spot-1", INTERRUPTION_ANNOTATION, "2026-11-29T12:02:00Z")
    fleet.sync(op)
    assert sources(api, "SpotInterruption") == {("gpufleet-operator", "gpufleet-operator")}


def test_the_scheduler_s_events_still_come_from_the_scheduler(api: FakeApiServer) -> None:
    add_queues(api, "team-a")
    sched = KubeScheduler(api, clock=lambda: training.NOW)
    add_pods(api, [pod("huge", gpus=8)])  # no node at all: it waits, and says why
    run(sched)
    assert sources(api, "FailedScheduling") == {("gpufleet-scheduler", "gpufleet-scheduler")}
