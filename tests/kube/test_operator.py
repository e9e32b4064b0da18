"""The TrainingJob operator against the in-memory API server, with the scheduler binding its pods."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.api import ObjectMeta
from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.training import TrainingJob
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer
from .test_scheduler import PODS, add_node, add_queues, run

NOW = 1_900_000_000.0
JOBS = "gpufleet.io/v1alpha1/trainingjobs"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def make_job(api: FakeApiServer, *, replicas: int = 2, max_restarts: int = 3) -> None:
    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "llm", "namespace": "team-a"},
            "spec": {
                "queue": "team-a",
                "replicas": replicas,
                "worker": {
                    "gpus": 8,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "template": {"spec": {"containers": [{"name": "train", "image": "trainer:1"}]}},
                },
                "topology": {"required": "rack"},
                "checkpoint": {"intervalSeconds": 600, "uri": "s3://ckpt/llm"},
                "restartPolicy": {"maxRestarts": max_restarts, "backoffSeconds": 30},
            },
        }
    )
    KubeStore(api).create(job)


def sync(op: Operator) -> None:
    for informer in (op.jobs, op.pods, op.services, op.checkpoints):
        informer.relist()
    op.mark("TrainingJob", "team-a/llm")
    op.reconcile_once()


def pods(api: FakeApiServer) -> dict[str, dict]:
    return {name: p for (ns, name), p in api.objects.get("/v1/pods", {}).items() if ns == "team-a"}


def env(pod: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def job_status(api: FakeApiServer) -> dict:
    return api.objects[JOBS][("team-a", "llm")].get("status", {})


def set_phase(api: FakeApiServer, name: str, phase: str, **extra: str) -> None:
    body = {"status": {"phase": phase, **extra}}
    api.request("PATCH", f"{PODS}/{name}/status", body=body, content_type="application/merge-patch+json")


@pytest.fixture
def world(api: FakeApiServer) -> tuple[Operator, KubeScheduler, Clock]:
    add_queues(api, "team-a")
    for i in range(4):
        add_node(api, f"gpu-{i}", labels={"gpufleet.io/rack": "r1"})
    clock = Clock()
    return Operator(api, clock=clock), KubeScheduler(api, clock=clock, bind_workers=0), clock


def test_workers_get_rendezvous_env_a_headless_service_and_are_bound(api: FakeApiServer, world) -> None:
    op, sched, _ = world
    make_job(api)
    sync(op)
    workers = pods(api)
    assert set(workers) == {"llm-0-0", "llm-0-1"}
    first = workers["llm-0-1"]
    assert env(first) == {
        "MASTER_ADDR": "llm-0-0.llm.team-a.svc",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "GPUFLEET_ATTEMPT": "0",
        "GPUFLEET_CHECKPOINT_DIR": "s3://ckpt/llm",
    }
    assert first["spec"]["hostname"] == "llm-0-1" and first["spec"]["subdomain"] == "llm"
    assert first["spec"]["schedulerName"] == "gpufleet"
    assert first["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    # the template's toleration, then the two NoExecute ones admission adds to every pod
    assert first["spec"]["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert {t["key"] for t in first["spec"]["tolerations"][1:]} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    labels = first["metadata"]["labels"]
    assert labels["gpufleet.io/gang"] == "llm-0" and labels["gpufleet.io/gang-size"] == "2"
    assert first["metadata"]["annotations"]["gpufleet.io/topology-required"] == "rack"
    (owner,) = first["metadata"]["ownerReferences"]
    assert owner["kind"] == "TrainingJob" and owner["name"] == "llm" and owner["controller"] is True
    service = api.objects["/v1/services"][("team-a", "llm")]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {
        "gpufleet.io/training-job": "llm"
    }
    run(sched)
    assert all(p["spec"].get("nodeName") for p in pods(api).values())
    sync(op)
    assert job_status(api)["phase"] == "Admitted" and job_status(api)["replicas"] == 2
    for name in pods(api):
        set_phase(api, name, "Running")
    sync(op)
    assert job_status(api)["phase"] == "Running" and job_status(api)["readyReplicas"] == 2


def test_a_failed_worker_restarts_the_gang_from_the_last_checkpoint(api: FakeApiServer, world) -> None:
    op, sched, clock = world
    make_job(api)
    sync(op)
    run(sched)
    store = KubeStore(api)
    for step, minute in ((100, 10), (200, 20)):
        ckpt = Checkpoint(
            metadata=ObjectMeta(name=f"llm-{step}", namespace="team-a"),
            spec=CheckpointSpec(
                job="llm",
                step=step,
                uri=f"s3://ckpt/llm/{step}",
                time=datetime(2030, 3, 17, 17, minute, tzinfo=UTC),
            ),
        )
        created = store.create(ckpt)
        store.update_status(
            created.model_copy(update={"status": created.status.model_copy(update={"phase": "Complete"})})
        )
    set_phase(api, "llm-0-0", "Failed", reason="Error", message="NCCL timeout")
    sync(op)
    status = job_status(api)
    assert status["restarts"] == 1 and status["phase"] == "Pending"
    assert status["lastCheckpoint"]["uri"] == "s3://ckpt/llm/200"
    assert all(p["metadata"].get("deletionTimestamp") for p in pods(api).values())  # attempt 0 leaves
    sync(op)
    assert not [n for n in pods(api) if n.startswith("llm-1-")]  # backoff
    clock.now += 31
    sync(op)
    fresh = {n: p for n, p in pods(api).items() if n.startswith("llm-1-")}
    assert set(fresh) == {"llm-1-0", "llm-1-1"}
    assert env(fresh["llm-1-0"])["GPUFLEET_CHECKPOINT_URI"] == "s3://ckpt/llm/200"
    assert env(fresh["llm-1-0"])["GPUFLEET_CHECKPOINT_STEP"] == "200"
    assert env(fresh["llm-1-0"])["MASTER_ADDR"] == "llm-1-0.llm.team-a.svc"


def test_an_evicted_worker_counts_as_a_restart_and_the_limit_fails_the_job(api: FakeApiServer, world) -> None:
    op, sched, _ = world
    make_job(api, max_restarts=0)
    sync(op)
    run(sched)
    api.request(
        "POST",
        f"{PODS}/llm-0-1/eviction",
        body={
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "llm-0-1", "namespace": "team-a"},
        },
    )
    sync(op)
    status = job_status(api)
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RestartLimitExceeded" and "llm-0-1" in failed["message"]


def test_a_deleted_job_takes_its_pods_and_service_along(api: FakeApiServer, world) -> None:
    op, _, _ = world
    make_job(api)
    sync(op)
    api.request("DELETE", "/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs/llm")
    sync(op)
    assert all(p["metadata"].get("deletionTimestamp") or False for p in pods(api).values()) or not pods(api)
    assert ("team-a", "llm") not in api.objects.get("/v1/services", {})


def test_a_job_without_containers_fails_with_the_field_named(api: FakeApiServer, world) -> None:
    op, _, _ = world
    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "llm", "namespace": "team-a"},
            "spec": {"replicas": 1, "worker": {"gpus": 1}},
        }
    )
    KubeStore(api).create(job)
    sync(op)
    assert job_status(api)["phase"] == "Failed"
    assert "spec.worker.template" in job_status(api)["conditions"][-1]["message"]
    assert pods(api) == {}


def test_a_job_written_with_kubectl_whose_template_asks_for_other_gpus_fails_naming_the_field(
    api: FakeApiServer, world
) -> None:
    op, _, _ = world
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": {
            "queue": "team-a",
            "replicas": 2,
            "worker": {
                "gpus": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "t", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
                        ]
                    }
                },
            },
        },
    }
    api.request(
        "POST", f"/apis/{JOBS.replace('/trainingjobs', '')}/namespaces/team-a/trainingjobs", body=body
    )
    sync(op)
    status = job_status(api)
    assert status["phase"] == "Failed" and not pods(api)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidTemplate"
    assert "worker.template.spec.containers[0].resources.limits.nvidia.com/gpu" in failed["message"]
    assert "remove nvidia.com/gpu from the template" in failed["message"]
