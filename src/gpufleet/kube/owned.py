"""Creating and deleting the objects an operator owns (pods, Services), as a level-triggered loop must.

A reconcile may run again before the API server's answer to the last one is seen, so an object that
already exists (409) or is already gone (404) is the state the loop wanted, not an error.
"""

from __future__ import annotations

from gpufleet.kube.resources import POD, ResourceType
from gpufleet.kube.transport import ApiError, Json, Transport


def create_owned(api: Transport, resource: ResourceType, obj: Json) -> None:
    """Creates the object; one that already exists counts as created."""
    try:
        api.request("POST", resource.collection(obj["metadata"].get("namespace")), body=obj)
    except ApiError as exc:
        if exc.status != 409:
            raise


def create_pod(api: Transport, pod: Json) -> None:
    create_owned(api, POD, pod)


def delete_pod(api: Transport, pod: Json) -> None:
    """Deletes the pod; one that is already gone counts as deleted."""
    meta = pod["metadata"]
    try:
        api.request("DELETE", POD.item(meta["name"], meta.get("namespace")))
    except ApiError as exc:
        if exc.status != 404:
            raise
