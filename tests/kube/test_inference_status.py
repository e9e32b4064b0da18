"""The InferenceService operator decides as the embedded world does (`controllers.servicestate`): a
restarted operator keeps the stabilization window its ServiceLoad saved, and scaling is announced."""

from __future__ import annotations

from gpufleet.kube.metrics import PrometheusSource
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.status import stamp

from . import test_inference
from .fakeapi import FakeApiServer
from .test_inference import Prometheus, make_ready, make_service, status, sync
from .test_operator import Clock
from .test_scheduler import run

world = test_inference.world  # four nodes, a queue, the scheduler and a clock
prometheus = test_inference.prometheus  # a real HTTP endpoint answering Prometheus queries


def scaled(api: FakeApiServer) -> list[str]:
    return [e["message"] for e in api.objects.get("/v1/events", {}).values() if e["reason"] == "Scaled"]


def test_a_restarted_operator_keeps_the_window_and_scale_down_waits_for_it(
    api: FakeApiServer, world, prometheus: Prometheus
) -> None:
    clock, _ = world
    make_service(api, autoscaling={"targetRequestsPerReplica": 10})
    prometheus.rps = 35.0
    first = Operator(api, clock=clock, nodes=False, metrics=PrometheusSource(prometheus.url))
    sync(first)
    assert status(api)["desiredReplicas"] == 4
    prometheus.rps = 5.0
    clock.now += 60
    restarted = Operator(api, clock=clock, nodes=False, metrics=PrometheusSource(prometheus.url))
    sync(restarted)
    assert status(api)["desiredReplicas"] == 4, "the window saved in the ServiceLoad still holds 4"
    clock.now += 301
    sync(restarted)
    assert status(api)["desiredReplicas"] == 1
    assert scaled(api) == ["desired replicas 0 -> 4", "desired replicas 4 -> 1"]
    assert next(
        (c["status"], c["reason"]) for c in status(api)["conditions"] if c["type"] == "MetricsAvailable"
    ) == ("True", "Sampled")


def test_a_restarted_operator_does_not_scale_on_an_observation_it_already_used(
    api: FakeApiServer, world: tuple[Clock, KubeScheduler]
) -> None:
    clock, sched = world
    make_service(api, replicas={"min": 1, "max": 4}, autoscaling={"targetLatencyP99Ms": 200.0})
    slow = {"requestsPerSecond": 5.0, "p99LatencyMs": 450.0, "readyReplicas": 1, "time": stamp(clock.now)}
    body = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ServiceLoad",
            "metadata": {"name": "chat", "namespace": "team-a"}, "spec": slow}  # fmt: skip
    api.request("POST", "/apis/gpufleet.io/v1alpha1/namespaces/team-a/serviceloads", body=body)
    first = Operator(api, clock=clock, nodes=False)
    sync(first)
    assert status(api)["desiredReplicas"] == 1  # too slow with none ready: one over those ready
    run(sched)
    make_ready(api)
    clock.now += 30
    sync(first)
    assert status(api)["desiredReplicas"] == 1  # the same observation is not used twice
    restarted = Operator(api, clock=clock, nodes=False)
    clock.now += 30
    sync(restarted)
    assert status(api)["desiredReplicas"] == 1, "the ServiceLoad's status says that sample was used"
    assert scaled(api) == ["desired replicas 0 -> 1"]
