"""Writing ResourceClaims' status for the secondary scheduler, as kube-scheduler's DynamicResources
plugin does in its PreBind: before a pod's Binding, each of its claims gets `status.allocation` (the
devices, by request, driver, pool and device, and the node selector that pins them) and the pod in
`status.reservedFor`. A claim already allocated keeps its allocation (a shared claim is allocated once,
by its first pod); one allocated other devices than the scheduler decided is refused, never changed.

A pod that will not run (its Binding refused, the pod deleted) leaves `reservedFor`, and a claim that
no one reserves any more is deallocated, as the controller manager's resource-claim controller does.
Every write carries the claim's resourceVersion; a conflicting write reads the claim again.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.kube.resources import resource_for
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

log = logging.getLogger(__name__)

ATTEMPTS = 3
"""Writes of one claim tried before giving up on conflicts (others writing it at the same time)."""


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One claim of a pod and the allocation the scheduler decided for it."""

    namespace: str
    name: str
    allocation: Json
    """The claim's `status.allocation` as JSON."""

    @classmethod
    def of(cls, namespace: str, name: str, allocation: ClaimAllocation) -> ClaimWrite:
        status = allocation.to_status().model_dump(by_alias=True, exclude_none=True, mode="json")
        return cls(namespace, name, status)


def _path(namespace: str, name: str, subresource: str | None = None) -> str:
    return resource_for("ResourceClaim").item(name, namespace, subresource)


def _results(allocation: Json | None) -> list[tuple[str, str, str, str]]:
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    return sorted(
        (r.get("request", ""), r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in results
    )


def consumer(pod: Json) -> Json:
    meta = pod["metadata"]
    return {"resource": "pods", "name": meta["name"], "uid": meta.get("uid", "")}


def reserve(api: Transport, pod: Json, writes: Sequence[ClaimWrite]) -> None:
    """Allocates (where not yet) and reserves each claim for `pod`. Raises NotFoundError (a claim gone),
    ConflictError (a claim allocated other devices, or written by others too often) or ApiError (the
    server failing); what was reserved before the failure is undone, so the pod may be placed afresh."""
    done: list[ClaimWrite] = []
    try:
        for write in writes:
            _update(api, write.namespace, write.name, lambda claim, w=write: _reserved(claim, w, pod))
            done.append(write)
    except Exception:
        try:
            unreserve(api, pod["metadata"].get("uid", ""), [(w.namespace, w.name) for w in done])
        except ApiError as exc:  # the collection of gone pods' reservations will finish it
            log.warning("pod %s: undoing its claims' reservation failed: %s", pod["metadata"]["name"], exc)
        raise


def _reserved(claim: Json, write: ClaimWrite, pod: Json) -> Json | None:
    status = claim.setdefault("status", {})
    allocation = status.get("allocation")
    if allocation is None:
        status["allocation"] = copy.deepcopy(write.allocation)
    elif _results(allocation) != _results(write.allocation):
        raise ConflictError(
            "is allocated other devices than the scheduler decided; it is not re-allocated",
            obj=f"ResourceClaim {write.namespace}/{write.name}",
            field="status.allocation",
        )
    reserved = status.setdefault("reservedFor", [])
    uid = pod["metadata"].get("uid")
    if any(r.get("uid") == uid for r in reserved):
        return None if allocation is not None else claim
    reserved.append(consumer(pod))
    return claim


def unreserve(api: Transport, uid: str, claims: Iterable[tuple[str, str]]) -> None:
    """Takes the pod (by uid) out of each claim's `reservedFor`; a claim left without one is deallocated."""
    for namespace, name in claims:
        try:
            _update(api, namespace, name, lambda claim: _without(claim, {uid}))
        except NotFoundError:
            continue


def _without(claim: Json, gone: Collection[str]) -> Json | None:
    status = claim.setdefault("status", {})
    reserved = status.get("reservedFor") or []
    kept = [r for r in reserved if r.get("uid") not in gone]
    if len(kept) == len(reserved) and (kept or status.get("allocation") is None):
        return None
    if kept:
        status["reservedFor"] = kept
    else:
        status.pop("reservedFor", None)
        status.pop("allocation", None)
    return claim


def collect(api: Transport, claims: Iterable[Json], live: Collection[str]) -> int:
    """For each claim reserved for pods that no longer exist (uids not in `live`), removes them (and
    deallocates a claim left reserved for no one). Returns the claims written."""
    written = 0
    for claim in claims:
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        gone = {
            r.get("uid", "") for r in reserved if r.get("resource") == "pods" and r.get("uid") not in live
        }
        if not gone:
            continue
        meta = claim["metadata"]
        try:
            _update(api, meta.get("namespace") or "", meta["name"], lambda c, g=gone: _without(c, g))
            written += 1
        except (NotFoundError, ConflictError, ApiError) as exc:
            log.warning(
                "ResourceClaim %s/%s: releasing gone pods failed: %s",
                meta.get("namespace"),
                meta["name"],
                exc,
            )
    return written


def _update(api: Transport, namespace: str, name: str, change: object) -> None:
    """Reads the claim, applies `change` (claim -> changed claim, or None for nothing to write) and writes
    its status with the read resourceVersion, reading again after a conflict."""
    assert callable(change)
    for _ in range(ATTEMPTS):
        try:
            claim = api.request("GET", _path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                raise NotFoundError("does not exist", obj=f"ResourceClaim {namespace}/{name}") from None
            raise
        changed = change(claim)
        if changed is None:
            return
        status = changed.get("status") or {}
        # A merge patch of the two fields (null removes one), guarded by the resourceVersion read: the
        # scheduler's role patches the status subresource and never replaces objects.
        patch = {
            "metadata": {"resourceVersion": claim["metadata"].get("resourceVersion")},
            "status": {field: status.get(field) for field in ("allocation", "reservedFor")},
        }
        try:
            api.request("PATCH", _path(namespace, name, "status"), body=patch, content_type=MERGE_PATCH)
            return
        except ApiError as exc:
            if exc.status == 404:
                raise NotFoundError("does not exist", obj=f"ResourceClaim {namespace}/{name}") from None
            if exc.status != 409:
                raise
    raise ConflictError(
        "written by others meanwhile, again and again", obj=f"ResourceClaim {namespace}/{name}"
    )
