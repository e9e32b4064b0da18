"""The operator on a real API server: a TrainingJob's workers are created, bound as one gang, and owned."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpufleet.kube.transport import ApiError, Json, Transport

from .conftest import RUN, Cluster, Recorded, wait_for

GROUP = "/apis/gpufleet.io/v1alpha1"
MERGE = "application/merge-patch+json"

pytestmark = pytest.mark.k8s


@pytest.fixture
def operator(api: Transport, cluster: Cluster) -> Iterator[Any]:
    """gpufleet's operator in this process, writing this run's scheduler name (no leader election)."""
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.operator import Operator

    # Only this run's Nodes: on a shared cluster the operator must not cordon anyone else's.
    selector = ",".join(f"{k}={v}" for k, v in cluster.selector.items())
    # Its namespace is the run's: the pools' sharing ConfigMaps go there and leave with it.
    config = KubeConfig(scheduler_name=cluster.scheduler_name, namespace=cluster.namespace)
    # Its requests are noted: what it was refused is part of what the tests check.
    op = Operator(Recorded(api), config=config, period=1.0, node_selector=selector)
    stop = threading.Event()
    op.informers.start(stop)
    thread = threading.Thread(target=op.run, args=(stop,), daemon=True)
    thread.start()
    yield op
    stop.set()
    thread.join(10)


def test_a_training_job_gets_workers_that_are_bound_as_one_gang(
    api: Transport, cluster: Cluster, scheduler: Any, operator: Any
) -> None:
    nodes = {cluster.node(f"tj-{i}") for i in range(2)}
    name = f"tj-{RUN}"
    jobs = f"/apis/gpufleet.io/v1alpha1/namespaces/{cluster.namespace}/trainingjobs"
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "queue": cluster.queue,
            "replicas": 2,
            "worker": {
                "gpus": 8,
                "cpu": "1",
                "memory": "1Gi",
                "nodeSelector": dict(cluster.selector),
                "template": {
                    "spec": {
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10"}],
                    }
                },
            },
        },
    }
    api.request("POST", jobs, body=body)
    try:
        workers = [f"{name}-0-0", f"{name}-0-1"]
        placed = wait_for(
            "workers bound",
            lambda: all(cluster.node_of(w) for w in workers) and {cluster.node_of(w) for w in workers},
            timeout=60,
        )
        assert placed == nodes
        pod = cluster.get_pod(workers[1])
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == f"{workers[0]}.{name}.{cluster.namespace}.svc"
        assert pod["metadata"]["ownerReferences"][0]["name"] == name
        service = api.request("GET", f"/api/v1/namespaces/{cluster.namespace}/services/{name}")
        assert service["spec"]["clusterIP"] == "None"
        status = wait_for(
            "job admitted",
            lambda: (
                (api.request("GET", f"{jobs}/{name}").get("status") or {}).get("phase")
                in ("Admitted", "Running")
                and api.request("GET", f"{jobs}/{name}")["status"]
            ),
        )
        assert status["replicas"] == 2
        _one_service_post(operator, cluster)
    finally:
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{jobs}/{name}")
        cluster.finish_deleting()


def _one_service_post(operator: Any, cluster: Cluster) -> None:
    """Every reconcile so far found the owner's Service in the operator's informer: one POST, never
    refused as already there (each refused POST of a ClusterIP Service makes a real API server
    allocate an IP and release it again)."""
    assert operator.api.statuses("POST", f"/api/v1/namespaces/{cluster.namespace}/services") == [200]


def _collection(cluster: Cluster, plural: str) -> str:
    return f"{GROUP}/namespaces/{cluster.namespace}/{plural}"


def _status_of(api: Transport, path: str) -> dict[str, Any]:
    return api.request("GET", path).get("status") or {}


def _play_kubelet(api: Transport, cluster: Cluster, *, prefix: str) -> None:
    """What kubelets would do: bound pods run and are Ready; pods asked to stop are gone."""
    cluster.finish_deleting()
    items = api.request("GET", f"/api/v1/namespaces/{cluster.namespace}/pods").get("items", [])
    for pod in items:
        name = pod["metadata"]["name"]
        if (
            name.startswith(prefix)
            and pod["spec"].get("nodeName")
            and pod["status"].get("phase") == "Pending"
        ):
            body = {"status": {"phase": "Running", "podIP": "10.1.2.3",
                               "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
            with contextlib.suppress(ApiError):
                api.request(
                    "PATCH", f"/api/v1/namespaces/{cluster.namespace}/pods/{name}/status", body=body,
                    content_type=MERGE,
                )  # fmt: skip


def test_a_failed_worker_restarts_the_job_from_its_last_checkpoint(
    api: Transport, cluster: Cluster, scheduler: Any, operator: Any
) -> None:
    cluster.node("ck-0")
    name = f"ck-{RUN}"
    jobs = _collection(cluster, "trainingjobs")
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "queue": cluster.queue,
            "replicas": 1,
            "restartPolicy": {"maxRestarts": 2, "backoffSeconds": 1},
            "worker": {
                "gpus": 8,
                "nodeSelector": dict(cluster.selector),
                "template": {"spec": {"containers": [{"name": "t", "image": "registry.k8s.io/pause:3.10"}]}},
            },
        },
    }
    api.request("POST", jobs, body=body)
    checkpoints = _collection(cluster, "checkpoints")
    try:
        wait_for("worker bound", lambda: cluster.node_of(f"{name}-0-0"), timeout=60)
        ckpt = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Checkpoint",
            "metadata": {"name": f"{name}-step-500", "namespace": cluster.namespace},
            "spec": {
                "job": name,
                "step": 500,
                "uri": f"s3://ckpt/{name}/500",
                "time": "2026-11-29T12:00:00Z",
            },
        }
        api.request("POST", checkpoints, body=ckpt)
        api.request(
            "PATCH", f"{checkpoints}/{name}-step-500/status", body={"status": {"phase": "Complete"}},
            content_type=MERGE,
        )  # fmt: skip
        # The kubelet's report of a crashed worker.
        failed = {"status": {"phase": "Failed", "reason": "Error", "message": "exit code 1"}}
        api.request(
            "PATCH", f"/api/v1/namespaces/{cluster.namespace}/pods/{name}-0-0/status", body=failed,
            content_type=MERGE,
        )  # fmt: skip

        def restarted() -> bool:
            cluster.finish_deleting()
            try:
                return bool(cluster.node_of(f"{name}-1-0"))
            except ApiError:
                return False

        wait_for("the next attempt bound", restarted, timeout=60)
        pod = cluster.get_pod(f"{name}-1-0")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["GPUFLEET_CHECKPOINT_URI"] == f"s3://ckpt/{name}/500"
        assert env["GPUFLEET_CHECKPOINT_STEP"] == "500"
        assert _status_of(api, f"{jobs}/{name}")["restarts"] == 1
    finally:
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{jobs}/{name}")
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{checkpoints}/{name}-step-500")
        cluster.finish_deleting()


def test_an_inference_service_scales_on_its_load_and_rolls_out_a_new_version(
    api: Transport, cluster: Cluster, scheduler: Any, operator: Any
) -> None:
    for i in range(4):
        cluster.node(f"is-{i}", gpus=1)
    name = f"is-{RUN}"
    versions, services = _collection(cluster, "modelversions"), _collection(cluster, "inferenceservices")
    for version in ("v1", "v2"):
        mv = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "ModelVersion",
            "metadata": {"name": f"{name}-{version}", "namespace": cluster.namespace},
            "spec": {"model": name, "version": version, "uri": f"s3://models/{version}"},
        }
        api.request("POST", versions, body=mv)
    body = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "queue": cluster.queue,
            "modelVersion": f"{name}-v1",
            "replicas": {"min": 1, "max": 3},
            "autoscaling": {"targetRequestsPerReplica": 10},
            "rollout": {"maxSurge": 1, "maxUnavailable": 0},
            "replica": {
                "gpus": 1,
                "nodeSelector": dict(cluster.selector),
                "template": {"spec": {"containers": [{"name": "s", "image": "registry.k8s.io/pause:3.10"}]}},
            },
        },
    }
    api.request("POST", services, body=body)
    load = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ServiceLoad",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "requestsPerSecond": 25,
            "p99LatencyMs": 50,
            "readyReplicas": 0,
            "time": "2026-11-29T12:00:00Z",
        },
    }
    api.request("POST", _collection(cluster, "serviceloads"), body=load)

    def pods(revision: str | None = None) -> list[Json]:
        items = api.request("GET", f"/api/v1/namespaces/{cluster.namespace}/pods").get("items", [])
        return [
            p for p in items
            if p["metadata"].get("labels", {}).get("gpufleet.io/inference-service") == name
            and not p["metadata"].get("deletionTimestamp")
            and (revision is None or p["metadata"]["labels"].get("gpufleet.io/revision") == revision)
        ]  # fmt: skip

    try:

        def scaled() -> bool:
            _play_kubelet(api, cluster, prefix=name)
            live = pods(f"{name}-v1")
            return len(live) == 3 and all(p["spec"].get("nodeName") for p in live)

        wait_for("three v1 replicas bound (25 req/s at 10 per replica)", scaled, timeout=60)
        front = api.request("GET", f"/api/v1/namespaces/{cluster.namespace}/services/{name}")
        assert front["spec"]["selector"] == {"gpufleet.io/inference-service": name}
        api.request(
            "PATCH", f"{services}/{name}", body={"spec": {"modelVersion": f"{name}-v2"}}, content_type=MERGE
        )

        def rolled() -> bool:
            _play_kubelet(api, cluster, prefix=name)
            live = pods()
            assert len(live) <= 4, "maxSurge 1 over 3 desired"
            return len(live) == 3 and all(
                p["metadata"]["labels"]["gpufleet.io/revision"] == f"{name}-v2" and p["spec"].get("nodeName")
                for p in live
            )

        wait_for("every replica on v2", rolled, timeout=90)
        rolled_out = next(
            c for c in _status_of(api, f"{services}/{name}")["conditions"] if c["type"] == "RolledOut"
        )
        assert rolled_out["status"] == "True" or rolled_out["reason"] == "RollingOut"
        _one_service_post(operator, cluster)
    finally:
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{services}/{name}")
        for version in ("v1", "v2"):
            with contextlib.suppress(ApiError):
                api.request("DELETE", f"{versions}/{name}-{version}")
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{_collection(cluster, 'serviceloads')}/{name}")
        cluster.finish_deleting()


def test_a_spot_interruption_notice_cordons_the_node_and_evicts_its_pods(
    api: Transport, cluster: Cluster, scheduler: Any, operator: Any
) -> None:
    node = cluster.node("spot")
    cluster.pod("on-spot", gpus=8)
    assert wait_for("pod bound", lambda: cluster.node_of("on-spot")) == node
    notice = {"metadata": {"annotations": {"gpufleet.io/interruption-time": "2026-11-29T12:02:00Z"}}}
    api.request("PATCH", f"/api/v1/nodes/{node}", body=notice, content_type=MERGE)
    wait_for(
        "node cordoned",
        lambda: api.request("GET", f"/api/v1/nodes/{node}").get("spec", {}).get("unschedulable"),
    )

    def evicted() -> bool:
        try:
            return bool(cluster.get_pod("on-spot")["metadata"].get("deletionTimestamp"))
        except ApiError as exc:
            return exc.status == 404

    wait_for("pod evicted", evicted)
    # The Event follows the eviction (and the DisruptionTarget reason), so it may come a moment later.
    wait_for(
        "the pod's SpotInterruption event",
        lambda: "on-spot" in {e["involvedObject"]["name"] for e in cluster.events("SpotInterruption")},
    )
    annotations = api.request("GET", f"/api/v1/nodes/{node}")["metadata"]["annotations"]
    assert annotations["gpufleet.io/cordoned-by"] == "spot-interruption"
    cluster.finish_deleting()


def test_a_job_whose_queue_offers_spot_capacity_tolerates_the_spot_taint_and_runs_there(
    api: Transport, cluster: Cluster, scheduler: Any, operator: Any
) -> None:
    """The operator taints a spot pool's nodes; the workers of a job whose queue has a `MODEL/spot`
    flavor get the toleration without the user writing it, and land there."""
    spot_label = {"gpufleet.io/e2e-spot": RUN}
    node = cluster.node("sp-0", labels=spot_label)
    pool_name, queue_name, name = f"spot-{RUN}", f"{cluster.queue}-spot", f"sj-{RUN}"
    pool = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": pool_name},
        "spec": {
            "gpuModel": "H100-80GB",
            "gpusPerNode": 8,
            "capacityType": "spot",
            "nodeSelector": spot_label,
        },
    }
    queue = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": queue_name},
        "spec": {"quotas": {"H100-80GB/spot": {"nominal": 8}}},
    }
    api.request("POST", f"{GROUP}/gpupools", body=pool)
    api.request("POST", f"{GROUP}/queues", body=queue)
    jobs = _collection(cluster, "trainingjobs")
    try:

        def tainted() -> bool:
            taints = api.request("GET", f"/api/v1/nodes/{node}").get("spec", {}).get("taints") or []
            return any(t["key"] == "gpufleet.io/spot" for t in taints)

        wait_for("the spot taint on the pool's node", tainted)
        body = {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {
                "queue": queue_name,
                "replicas": 1,
                "worker": {
                    "gpus": 8,
                    "nodeSelector": dict(cluster.selector),
                    "template": {
                        "spec": {"containers": [{"name": "t", "image": "registry.k8s.io/pause:3.10"}]}
                    },
                },
            },
        }
        api.request("POST", jobs, body=body)
        assert wait_for("worker bound", lambda: cluster.node_of(f"{name}-0-0"), timeout=60) == node
        tolerations = cluster.get_pod(f"{name}-0-0")["spec"].get("tolerations") or []
        assert {"key": "gpufleet.io/spot", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    finally:
        for path in (f"{jobs}/{name}", f"{GROUP}/queues/{queue_name}", f"{GROUP}/gpupools/{pool_name}"):
            with contextlib.suppress(ApiError):
                api.request("DELETE", path)
        cluster.finish_deleting()


def test_a_shared_pool_gets_its_sharing_config_map_and_its_nodes_select_it(
    api: Transport, cluster: Cluster, operator: Any
) -> None:
    """Time-slicing: one ConfigMap per pool in the device plugin's format the agent reads, picked by
    the nodes' labels; gone with the pool, and so are the labels."""
    from gpufleet.agent.config import parse_config

    shared_label = {"gpufleet.io/e2e-shared": RUN}
    node = cluster.node("ts-0", labels=shared_label)
    pool_name = f"ts-{RUN}"
    pool = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": pool_name},
        "spec": {
            "gpuModel": "H100-80GB",
            "gpusPerNode": 8,
            "sharing": {"timeSlicing": {"replicas": 4}},
            "nodeSelector": shared_label,
        },
    }
    api.request("POST", f"{GROUP}/gpupools", body=pool)
    path = f"/api/v1/namespaces/{cluster.namespace}/configmaps/gpufleet-sharing-{pool_name}"

    def config_map() -> Json | None:
        try:
            return api.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def labels() -> dict[str, str]:
        return api.request("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels") or {}

    try:
        made = wait_for("the pool's sharing ConfigMap", config_map)
        assert set(made["data"]) == {"time-slicing-4"}
        read = parse_config(yaml.safe_load(made["data"]["time-slicing-4"]), where="configmap")
        assert (
            read.sharing.strategy == "time-slicing"
            and read.sharing.replication.replicas("nvidia.com/gpu") == 4
        )
        assert made["metadata"]["ownerReferences"][0]["name"] == pool_name
        picked = wait_for(
            "the node's sharing labels", lambda: labels().get("gpufleet.io/sharing-config") and labels()
        )
        assert picked["gpufleet.io/sharing-config"] == f"gpufleet-sharing-{pool_name}"
        assert picked["nvidia.com/device-plugin.config"] == "time-slicing-4"
    finally:
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{GROUP}/gpupools/{pool_name}")
    wait_for("the ConfigMap removed with its pool", lambda: config_map() is None)
    wait_for("the sharing labels removed", lambda: "gpufleet.io/sharing-config" not in labels())


def test_a_job_kubectl_wrote_that_gpufleet_refuses_fails_naming_the_field_and_the_next_runs(
    api: Transport, cluster: Cluster, scheduler: Any, operator: Any
) -> None:
    cluster.node("tj-refused")
    jobs = f"/apis/gpufleet.io/v1alpha1/namespaces/{cluster.namespace}/trainingjobs"

    def job(name: str, container: Any) -> Json:
        worker = {
            "gpus": 8,
            "nodeSelector": dict(cluster.selector),
            "template": {"spec": {"containers": [container]}},
        }
        return {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {"queue": cluster.queue, "replicas": 1, "worker": worker},
        }

    bad, good = f"refused-{RUN}", f"next-{RUN}"
    # The CRD keeps the template's unknown fields: the API server stores an env written as a mapping.
    env_mapping = {"name": "train", "image": "registry.k8s.io/pause:3.10", "env": {"A": "1"}}
    api.request("POST", jobs, body=job(bad, env_mapping))
    api.request("POST", jobs, body=job(good, {"name": "train", "image": "registry.k8s.io/pause:3.10"}))
    try:

        def failed() -> Json | None:
            status = api.request("GET", f"{jobs}/{bad}").get("status") or {}
            return status if status.get("phase") == "Failed" else None

        status = wait_for("the refused job Failed", failed, timeout=60)
        condition = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert condition["reason"] == "InvalidSpec"
        assert "spec.worker.template.spec.containers[0].env" in condition["message"]
        assert wait_for("the next job's worker bound", lambda: cluster.node_of(f"{good}-0-0"), timeout=60)
        assert cluster.node_of(f"{bad}-0-0") is None
    finally:
        for name in (bad, good):
            with contextlib.suppress(ApiError):
                api.request("DELETE", f"{jobs}/{name}")
