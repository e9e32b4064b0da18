"""The InferenceService operator against the in-memory API server, with the scheduler binding replicas
and a real HTTP server playing Prometheus."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from gpufleet.api.labels import REVISION_LABEL
from gpufleet.kube.metrics import PrometheusSource
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from .fakeapi import FakeApiServer
from .test_operator import Clock
from .test_scheduler import PODS, add_node, add_queues, run

SERVICES = "/apis/gpufleet.io/v1alpha1/namespaces/team-a/inferenceservices"
KEY = ("team-a", "chat")


class Prometheus:
    """A real HTTP endpoint answering /api/v1/query with the load set by the test."""

    def __init__(self) -> None:
        self.rps = 0.0
        self.latency = 10.0
        self.queries: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)["query"][0]
                owner.queries.append(query)
                value = owner.latency if "histogram_quantile" in query else owner.rps
                body = {"status": "success", "data": {"resultType": "vector", "result": [
                    {"metric": {}, "value": [1.0, str(value)]}]}}  # fmt: skip
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    prom = Prometheus()
    yield prom
    prom.close()


def make_service(api: FakeApiServer, **spec: object) -> None:
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {
            "queue": "team-a",
            "replicas": {"min": 1, "max": 4},
            "replica": {
                "gpus": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "serve",
                                "image": "vllm:1",
                                "ports": [{"name": "http", "containerPort": 8000}],
                            }
                        ]
                    }
                },
            },
            **spec,
        },
    }
    api.request("POST", SERVICES, body=body)


def model_version(api: FakeApiServer, name: str) -> None:
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelVersion",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"model": "chat", "version": name, "uri": f"s3://models/{name}"},
    }
    api.request("POST", "/apis/gpufleet.io/v1alpha1/namespaces/team-a/modelversions", body=body)


def sync(op: Operator) -> None:
    for informer in (op.inference, op.replicas, op.frontends, op.versions, op.loads):
        informer.relist()
    op.mark("InferenceService", "team-a/chat")
    op.reconcile_once()


def replicas(api: FakeApiServer) -> dict[str, dict]:
    return {
        name: p
        for (ns, name), p in api.objects.get("/v1/pods", {}).items()
        if ns == "team-a" and not p["metadata"].get("deletionTimestamp")
    }


def status(api: FakeApiServer) -> dict:
    return api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY].get("status", {})


def make_ready(api: FakeApiServer) -> None:
    """The kubelet's part: bound replicas run and pass their readiness probe."""
    for name, pod in replicas(api).items():
        if pod["spec"].get("nodeName") and pod["status"].get("phase") != "Running":
            body = {"status": {"phase": "Running", "podIP": "10.0.0.1",
                               "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
            api.request(
                "PATCH", f"{PODS}/{name}/status", body=body, content_type="application/merge-patch+json"
            )


def condition(api: FakeApiServer, kind: str) -> dict:
    return next(c for c in status(api)["conditions"] if c["type"] == kind)


@pytest.fixture
def world(api: FakeApiServer) -> tuple[Clock, KubeScheduler]:
    add_queues(api, "team-a")
    for i in range(4):
        add_node(api, f"gpu-{i}")
    clock = Clock()
    return clock, KubeScheduler(api, clock=clock, bind_workers=0)


def test_replicas_from_the_template_and_a_service_selecting_them(api: FakeApiServer, world) -> None:
    clock, sched = world
    model_version(api, "v1")
    make_service(api, modelVersion="v1", replicas={"min": 2, "max": 4})
    op = Operator(api, clock=clock, nodes=False)
    sync(op)
    pods = replicas(api)
    assert set(pods) == {"chat-0", "chat-1"}
    pod = pods["chat-0"]
    assert pod["spec"]["schedulerName"] == "gpufleet"
    assert pod["metadata"]["labels"][REVISION_LABEL] == "v1"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {e["name"]: e["value"] for e in container["env"]}["GPUFLEET_MODEL_URI"] == "s3://models/v1"
    service = api.get("/api/v1/namespaces/team-a/services/chat")
    assert service["spec"]["selector"] == {"gpufleet.io/inference-service": "chat"}
    assert service["spec"]["ports"][0]["port"] == 8000
    run(sched)
    make_ready(api)
    sync(op)
    assert status(api)["readyReplicas"] == 2 and status(api)["phase"] == "Running"
    assert condition(api, "Ready")["status"] == "True"


def test_a_missing_template_fails_the_service_with_the_field_named(api: FakeApiServer, world) -> None:
    clock, _ = world
    make_service(api, replica={"gpus": 1})
    sync(Operator(api, clock=clock, nodes=False))
    assert status(api)["phase"] == "Failed"
    assert "spec.replica.template.spec.containers" in condition(api, "Ready")["message"]
    assert not replicas(api)


def test_prometheus_load_scales_up_at_once_and_down_after_the_window(
    api: FakeApiServer, world, prometheus: Prometheus
) -> None:
    clock, sched = world
    make_service(api, autoscaling={"targetRequestsPerReplica": 10})
    source = PrometheusSource(prometheus.url)
    op = Operator(api, clock=clock, nodes=False, metrics=source, sample_seconds=15)
    prometheus.rps = 35.0
    sync(op)
    assert status(api)["desiredReplicas"] == 4 and len(replicas(api)) == 4
    assert 'service="chat"' in prometheus.queries[0] and 'namespace="team-a"' in prometheus.queries[0]
    load = api.objects["gpufleet.io/v1alpha1/serviceloads"][KEY]
    assert load["spec"]["requestsPerSecond"] == 35.0
    assert load["status"]["recent"][0]["replicas"] == 4
    run(sched)
    make_ready(api)
    prometheus.rps = 5.0
    clock.now += 60
    sync(op)
    assert status(api)["desiredReplicas"] == 4, "scale-down waits for the stabilization window"
    clock.now += 301
    sync(op)
    assert status(api)["desiredReplicas"] == 1
    assert len(replicas(api)) == 1


def test_an_unreachable_prometheus_is_reported_and_the_count_kept(api: FakeApiServer, world) -> None:
    clock, _ = world
    make_service(api, autoscaling={"targetRequestsPerReplica": 10}, replicas={"min": 2, "max": 4})
    op = Operator(api, clock=clock, nodes=False, metrics=PrometheusSource("http://127.0.0.1:9"))
    sync(op)
    assert status(api)["desiredReplicas"] == 2 and len(replicas(api)) == 2
    unavailable = condition(api, "MetricsAvailable")
    assert unavailable["status"] == "False"
    assert (
        "InferenceService team-a/chat" in unavailable["message"] and "unreachable" in unavailable["message"]
    )
    events = [e for e in api.objects.get("/v1/events", {}).values() if e["reason"] == "MetricsUnavailable"]
    assert len(events) == 1
    assert ("InferenceService", "team-a/chat") in op.requeue, "sampled again later"


def test_a_new_model_version_rolls_out_within_max_surge(api: FakeApiServer, world) -> None:
    clock, sched = world
    model_version(api, "v1")
    make_service(api, modelVersion="v1", replicas={"min": 2, "max": 2})
    op = Operator(api, clock=clock, nodes=False)
    sync(op)
    run(sched)
    make_ready(api)
    service = api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]
    patch = {"spec": {"modelVersion": "v2"}}
    api.request("PATCH", f"{SERVICES}/chat", body=patch, content_type="application/merge-patch+json")
    sync(op)
    assert condition(api, "RolledOut")["reason"] == "ModelVersionNotFound"
    assert {p["metadata"]["labels"][REVISION_LABEL] for p in replicas(api).values()} == {"v1"}
    model_version(api, "v2")
    seen_max = 0
    for _ in range(8):
        sync(op)
        seen_max = max(seen_max, len(replicas(api)))
        ready = [p for p in replicas(api).values() if p["status"].get("phase") == "Running"]
        assert len(ready) >= 2, "maxUnavailable 0: never fewer ready than desired"
        run(sched)
        make_ready(api)
        api.objects["/v1/pods"] = {
            k: p for k, p in api.objects["/v1/pods"].items() if not p["metadata"].get("deletionTimestamp")
        }
    revisions = [p["metadata"]["labels"][REVISION_LABEL] for p in replicas(api).values()]
    assert revisions == ["v2", "v2"]
    assert seen_max == 3, "maxSurge 1"
    assert condition(api, "RolledOut")["status"] == "True"
    assert service["metadata"]["uid"]


def test_a_failed_replica_is_replaced_and_the_service_deletion_collects_everything(
    api: FakeApiServer, world
) -> None:
    clock, _ = world
    make_service(api)
    op = Operator(api, clock=clock, nodes=False)
    sync(op)
    body = {"status": {"phase": "Failed", "reason": "Error"}}
    api.request("PATCH", f"{PODS}/chat-0/status", body=body, content_type="application/merge-patch+json")
    sync(op)
    sync(op)
    assert set(replicas(api)) == {"chat-1"}
    api.request("DELETE", f"{SERVICES}/chat")
    sync(op)
    assert not replicas(api)
    assert ("team-a", "chat") not in api.objects.get("/v1/services", {})


def test_a_suspended_service_deletes_its_replicas_and_resuming_brings_them_back(
    api: FakeApiServer, world
) -> None:
    clock, sched = world
    make_service(api, replicas={"min": 2, "max": 4})
    op = Operator(api, clock=clock, nodes=False)
    sync(op)
    run(sched)
    make_ready(api)
    sync(op)
    assert status(api)["phase"] == "Running" and set(replicas(api)) == {"chat-0", "chat-1"}
    api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]["spec"]["suspend"] = True
    sync(op)
    assert replicas(api) == {}
    suspended = status(api)
    assert suspended["phase"] == "Suspended" and suspended["desiredReplicas"] == 0
    assert (condition(api, "Suspended")["status"], condition(api, "Suspended")["reason"]) == (
        "True",
        "Suspended",
    )
    api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]["spec"]["suspend"] = False
    sync(op)
    assert len(replicas(api)) == 2 and status(api)["phase"] == "Pending"
    assert condition(api, "Suspended")["reason"] == "Resumed"
