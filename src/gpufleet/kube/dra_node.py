"""The node agent's API-server side as a DRA driver (`gpufleet agent --dra`): reading the claims the
kubelet asks it to prepare, and publishing its node's ResourceSlices. The agent decides what to
publish (`gpufleet.agent.dra`); only `kube` talks to the API server, through `Transport` (the
official client's `KubeTransport` in a cluster).

Publishing as kube-scheduler reads pools: the node's slices (driver `gpu.nvidia.com`, pool and
`spec.nodeName` the node) are written only when what the node publishes changed, and then all at a new
pool generation, stale slices deleted, so a reader that sees slices of two generations takes only the
newest. Slices are owned by their Node, so the garbage collector removes them with it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from gpufleet.api.dra import ResourceClaim
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.kube.dra import claim_model
from gpufleet.kube.resources import NODE, resource_for
from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.sharing.dra_slices import DRIVER, slice_name

log = logging.getLogger(__name__)

Wanted = Callable[[int], list[ResourceSliceSpec]]


def claim_reader(api: Transport) -> Callable[[str, str], ResourceClaim | None]:
    """Reads a ResourceClaim by namespace and name (None when there is none)."""

    def read(namespace: str, name: str) -> ResourceClaim | None:
        try:
            obj = api.request("GET", resource_for("ResourceClaim").item(name, namespace))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return claim_model(obj)

    return read


def published(api: Transport, node: str) -> list[Json]:
    """The node's slices of our driver, in name order."""
    listed = api.request(
        "GET",
        resource_for("ResourceSlice").collection(),
        query={"fieldSelector": f"spec.nodeName={node},spec.driver={DRIVER}"},
    )
    return sorted(listed.get("items", []), key=lambda s: s["metadata"]["name"])


def publish(api: Transport, node: str, wanted: Wanted) -> bool:
    """Brings the node's slices in line with `wanted(generation)`; True when anything was written."""
    current = published(api, node)
    generation = max((int(s["spec"]["pool"]["generation"]) for s in current), default=0)
    if [s["spec"] for s in current] == [spec.to_dict() for spec in wanted(generation)]:
        return False
    specs = wanted(generation + 1)
    owner = _owner(api, node)
    by_name = {s["metadata"]["name"]: s for s in current}
    slices = resource_for("ResourceSlice")
    for index, spec in enumerate(specs):
        name = slice_name(node, index)
        body: Json = {
            "apiVersion": slices.api_version,
            "kind": "ResourceSlice",
            "metadata": {"name": name, **({"ownerReferences": [owner]} if owner else {})},
            "spec": spec.to_dict(),
        }
        existing = by_name.get(name)
        if existing is None:
            api.request("POST", slices.collection(), body=body)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            api.request("PUT", slices.item(name), body=body)
    for stale in current[len(specs) :]:
        with contextlib.suppress(ApiError):  # already gone is as good as deleted
            api.request("DELETE", slices.item(stale["metadata"]["name"]))
    log.info("node %s: %d ResourceSlices at generation %d", node, len(specs), generation + 1)
    return True


def slice_publisher(api: Transport) -> Callable[[str, Wanted], None]:
    """`publish` as the agent's DRA driver calls it."""

    def run(node: str, wanted: Wanted) -> None:
        publish(api, node, wanted)

    return run


def withdraw(api: Transport, node: str) -> None:
    """Deletes the node's slices (a node leaving DRA)."""
    for stale in published(api, node):
        with contextlib.suppress(ApiError):
            api.request("DELETE", resource_for("ResourceSlice").item(stale["metadata"]["name"]))


def _owner(api: Transport, node: str) -> Json | None:
    """The Node as the slices' owner; None where it cannot be read (the slices are then unowned)."""
    try:
        uid = api.request("GET", NODE.item(node))["metadata"]["uid"]
    except (ApiError, KeyError) as exc:
        log.warning("node %s: cannot read the Node to own its ResourceSlices: %s", node, exc)
        return None
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
