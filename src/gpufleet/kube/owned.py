"""Creating and deleting the objects an operator owns (pods, Services), as a level-triggered loop must.

A reconcile may run again before the API server's answer to the last one is seen, so an object that
already exists (409) or is already gone (404) is the state the loop wanted, not an error.

Spot capacity. The operator taints the nodes of spot GPUPools (`gpufleet.io/spot=true:NoSchedule`) so
that only workloads that accept being taken back land there, and the scheduler honours taints. A
workload accepts spot capacity when its queue has a `MODEL/spot` flavor; its pods are then created with
the matching toleration, so users need not write it.
"""

from __future__ import annotations

import logging

from gpufleet.api.labels import SPOT_TAINT
from gpufleet.kube.config import QUEUE_LABEL
from gpufleet.kube.resources import POD, ResourceType, resource_for
from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.scheduler.flavors import split_flavor

log = logging.getLogger(__name__)

SPOT_TOLERATION = {"key": SPOT_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def create_owned(api: Transport, resource: ResourceType, obj: Json) -> None:
    """Creates the object; one that already exists counts as created."""
    try:
        api.request("POST", resource.collection(obj["metadata"].get("namespace")), body=obj)
    except ApiError as exc:
        if exc.status != 409:
            raise


def create_pod(api: Transport, pod: Json, *, default_queue: str = "default") -> None:
    """Creates an operator-owned pod, tolerating the spot taint when its queue offers spot capacity."""
    create_owned(api, POD, with_spot_toleration(api, pod, default_queue=default_queue))


def accepts_spot(queue: Json) -> bool:
    """Whether a Queue object has a quota of some `MODEL/spot` flavor."""
    quotas = (queue.get("spec") or {}).get("quotas") or {}
    return any(split_flavor(str(flavor))[1] == "spot" for flavor in quotas)


def with_spot_toleration(api: Transport, pod: Json, *, default_queue: str = "default") -> Json:
    """The pod with the spot taint's toleration added when its queue accepts spot capacity and the pod
    does not tolerate the taint already; otherwise the pod as it is."""
    spec = pod.get("spec") or {}
    tolerations = list(spec.get("tolerations") or [])
    if any(_tolerates_spot(t) for t in tolerations):
        return pod
    name = (pod["metadata"].get("labels") or {}).get(QUEUE_LABEL) or default_queue
    try:
        queue = api.request("GET", resource_for("Queue").item(name))
    except ApiError as exc:  # no such queue: the scheduler tells the pod why it waits
        if exc.status != 404:
            log.warning("queue %s not read for pod %s: %s", name, pod["metadata"].get("name"), exc)
        return pod
    if not accepts_spot(queue):
        return pod
    return {**pod, "spec": {**spec, "tolerations": [*tolerations, dict(SPOT_TOLERATION)]}}


def _tolerates_spot(toleration: Json) -> bool:
    if toleration.get("effect") not in (None, "", "NoSchedule"):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", SPOT_TAINT)
    return toleration.get("key") == SPOT_TAINT and toleration.get("value") == "true"


def delete_pod(api: Transport, pod: Json) -> None:
    """Deletes the pod; one that is already gone counts as deleted."""
    meta = pod["metadata"]
    try:
        api.request("DELETE", POD.item(meta["name"], meta.get("namespace")))
    except ApiError as exc:
        if exc.status != 404:
            raise
