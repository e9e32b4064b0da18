"""Installing gpufleet's CustomResourceDefinitions (those `gpufleet manifests crds` prints)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.kube.resources import CRD
from gpufleet.kube.transport import ApiError, Json, Transport


def install_crds(
    api: Transport,
    crds: Iterable[Json] | None = None,
    *,
    wait_seconds: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Creates each CRD, or replaces the one there; waits until all are Established. Returns names."""
    names = []
    for crd in crds if crds is not None else custom_resource_definitions():
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            api.request("POST", CRD.collection(), body=crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = api.request("GET", CRD.item(name))
            body = {
                **crd,
                "metadata": {**crd["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
            }
            api.request("PUT", CRD.item(name), body=body)
    deadline = time.monotonic() + wait_seconds
    waiting = set(names)
    while waiting:
        for name in sorted(waiting):
            if _established(api.request("GET", CRD.item(name))):
                waiting.discard(name)
        if waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRDs not established after {wait_seconds:g}s: {sorted(waiting)}")
            sleep(0.5)
    return names


def _established(crd: Json) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
