"""Creating and deleting the pods an operator owns, as a level-triggered loop must.

A reconcile may run again before the API server's answer to the last one is seen, so a pod that already
exists (409) or is already gone (404) is the state the loop wanted, not an error.
"""

from __future__ import annotations

from gpufleet.kube.resources import POD
from gpufleet.kube.transport import ApiError, Json, Transport


def create_pod(api: Transport, pod: Json) -> None:
    """Creates the pod; one that already exists counts as created."""
    try:
        api.request("POST", POD.collection(pod["metadata"]["namespace"]), body=pod)
    except ApiError as exc:
        if exc.status != 409:
            raise


def delete_pod(api: Transport, pod: Json) -> None:
    """Deletes the pod; one that is already gone counts as deleted."""
    meta = pod["metadata"]
    try:
        api.request("DELETE", POD.item(meta["name"], meta.get("namespace")))
    except ApiError as exc:
        if exc.status != 404:
            raise
