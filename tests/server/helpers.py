"""Objects and paths the server tests share."""

from __future__ import annotations

from typing import Any

API = "/apis/gpufleet.io/v1alpha1"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def job(
    name: str, namespace: str = "team-a", *, queue_name: str = "team-a", replicas: int = 2
) -> dict[str, Any]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queue": queue_name, "replicas": replicas, "worker": {"gpus": 8}},
    }


def job_path(name: str = "", namespace: str = "team-a") -> str:
    base = f"{API}/namespaces/{namespace}/trainingjobs"
    return f"{base}/{name}" if name else base


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"type", "message", "object", "field", "status"}
    assert error["status"] == response.status_code
    return error
