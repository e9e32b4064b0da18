"""The federation's links over the embedded HTTP API (`gpufleet up`), on the CLI's client.

`HttpWorker` is the manager's `WorkerClient` for an embedded worker (`Cluster.spec.connection.embedded`
gives its URL); `HttpManager` is a worker's `ManagerLink`. Both send the token they are given; errors
are the client's `GpuFleetError`s, an unreachable plane included.
"""

from __future__ import annotations

import contextlib
from typing import Any

from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.training import TrainingJob
from gpufleet.api.validation import parse_object
from gpufleet.cli.client import PREFIX, Client


def _job_path(namespace: str, name: str) -> str:
    return f"{PREFIX}/namespaces/{namespace}/trainingjobs/{name}"


class HttpWorker:
    """A worker plane as the manager reaches it."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @classmethod
    def for_cluster(cls, cluster: Cluster, token: str | None) -> HttpWorker:
        embedded = cluster.spec.connection.embedded
        if embedded is None:
            raise ValidationError(
                f"Cluster {cluster.name}: not an embedded worker (no URL to reach it over HTTP)",
                field="spec.connection.embedded",
            )
        return cls(Client(embedded.url, token, timeout=5.0))

    def create_job(self, job: TrainingJob) -> None:
        self.client.apply([job.to_dict()])

    def read_job(self, namespace: str, name: str) -> TrainingJob | None:
        try:
            data: dict[str, Any] = self.client.get(_job_path(namespace, name))
        except NotFoundError:
            return None
        job = parse_object(data)
        assert isinstance(job, TrainingJob)
        return job

    def delete_job(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.client.request("DELETE", _job_path(namespace, name))


class HttpManager:
    """The manager plane as a worker reaches it."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def read_cluster(self, name: str) -> Cluster:
        cluster = parse_object(self.client.get(f"{PREFIX}/clusters/{name}"))
        assert isinstance(cluster, Cluster)
        return cluster

    def write_cluster_status(self, cluster: Cluster) -> Cluster:
        data = cluster.to_dict()
        body = {"metadata": {"resourceVersion": cluster.metadata.resource_version}, "status": data["status"]}
        self.client.request("PUT", f"{PREFIX}/clusters/{cluster.name}/status", json=body)
        # The status view carries no spec; the worker needs the lease from it, so read it back.
        return self.read_cluster(cluster.name)
