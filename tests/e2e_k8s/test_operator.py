"""The operator on a real API server: a TrainingJob's workers are created, bound as one gang, and owned."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.kube.transport import ApiError, Transport

from .conftest import RUN, Cluster, wait_for

pytestmark = pytest.mark.k8s


@pytest.fixture
def operator(api: Transport, cluster: Cluster) -> Iterator[Any]:
    """gpufleet's operator in this process, writing this run's scheduler name (no leader election)."""
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.operator import Operator

    op = Operator(api, config=KubeConfig(scheduler_name=cluster.scheduler_name), period=1.0)
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
    finally:
        with contextlib.suppress(ApiError):
            api.request("DELETE", f"{jobs}/{name}")
        cluster.finish_deleting()
