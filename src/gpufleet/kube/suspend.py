"""`gpufleet suspend|resume tj|isvc NAME --kubeconfig ...`: a cluster's TrainingJob's or
InferenceService's `spec.suspend` set with a merge patch, as `kubectl patch` would; the operator then
stops or restarts it."""

from __future__ import annotations

from gpufleet.api.errors import NotFoundError
from gpufleet.kube.resources import resource_for
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Transport


def set_suspend(api: Transport, kind: str, namespace: str, name: str, value: bool) -> bool:
    """Sets the object's `spec.suspend`; whether that changed anything."""
    path = resource_for(kind).item(name, namespace)
    try:
        job = api.request("GET", path)
        if bool((job.get("spec") or {}).get("suspend")) == value:
            return False
        api.request("PATCH", path, body={"spec": {"suspend": value}}, content_type=MERGE_PATCH)
    except ApiError as exc:
        if exc.status == 404:
            raise NotFoundError("not found", obj=f"{kind} {namespace}/{name}") from None
        raise
    return True
