"""The embedded world's ResourceClaims, as kube-scheduler and the controller manager's resource-claim
controller keep them in Kubernetes.

- A pod's claims: each `resourceClaims` entry of its template names a shared ResourceClaim, or a
  ResourceClaimTemplate from which the pod gets a claim of its own. That claim is named
  deterministically, `{workload}-{podSet}-{entry}-{index}` (Kubernetes adds a random suffix to
  `{pod}-{entry}`; a name known in advance lets a restart find it), labelled with the pod it serves.
- Before a pod is bound (created, in this world) its claims carry `status.allocation` and list the pod
  in `status.reservedFor`; a shared claim is allocated once and lists every pod using it.
- When a pod is deleted or has finished it leaves `reservedFor`; a claim made for it is deleted; a
  claim reserved for no one is deallocated (its allocation cleared), since a claim may only keep its
  devices while it is reserved.
- An allocated claim carries the `resource.kubernetes.io/delete-protection` finalizer, as in
  Kubernetes: a user's delete of a claim in use waits until its last pod leaves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.api.dra import ResourceClaim, ResourceClaimTemplate
from gpufleet.api.dra_claims import PodResourceClaim, PodResourceClaimStatus, ResourceClaimConsumerReference
from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.api.labels import CLAIM_POD_LABEL, POD_CLAIM_NAME_ANNOTATION, WORKLOAD_LABEL
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Pod
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.store.protocol import Store

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer an allocated claim carries, so that it is not deleted under the pods using it."""


def template_claim_prefix(workload: str, pod_set: str, entry: str) -> str:
    """The claims a pod set's pods get from template entry `entry` are this, `-{index}`: the name the
    scheduling core gives pod `index`'s claim (`placement.dra.gang.pod_claims`)."""
    return f"{workload}-{pod_set}-{entry}"


def template_claim_name(workload: str, pod_set: str, entry: str, index: int) -> str:
    """The name of the claim pod `index` of a pod set gets from its template entry `entry`."""
    return f"{template_claim_prefix(workload, pod_set, entry)}-{index}"


def claim_names(workload: str, pod_set: str, index: int, entries: Sequence[PodResourceClaim]) -> list[str]:
    """Per `resourceClaims` entry, the claim the pod uses."""
    return [
        e.resource_claim_name
        if e.resource_claim_name is not None
        else template_claim_name(workload, pod_set, e.name, index)
        for e in entries
    ]


def consumer(pod: Pod) -> ResourceClaimConsumerReference:
    assert pod.metadata.uid is not None
    return ResourceClaimConsumerReference(resource="pods", name=pod.name, uid=pod.metadata.uid)


@dataclass(frozen=True, slots=True)
class Reserved:
    """A claim written for a pod: whether the write made the claim (to undo it by deleting it)."""

    claim: ResourceClaim
    made: bool
    found: ResourceClaim | None = None
    """A claim of the template's name that existed before and was adopted: as it was then."""


def reserve(
    store: Store,
    pod: Pod,
    entries: Sequence[PodResourceClaim],
    allocations: Sequence[ClaimAllocation],
    *,
    templates: dict[str, ResourceClaimTemplate],
) -> list[Reserved]:
    """Writes the pod's claims before the pod is created: a claim made from a template with its
    allocation, or a shared claim allocated (if it is not yet) with the pod added to `reservedFor`.

    `pod` is the pod about to be created, with its uid. `allocations` are the core's, one per entry in
    order. Raises GpuFleetError (a claim gone or changed meanwhile, a template gone, a shared claim
    allocated other devices): the caller undoes what was written (`unreserve`) and tries later."""
    namespace = pod.namespace or "default"
    done: list[Reserved] = []
    try:
        for entry, status in zip(pod.spec.resource_claims, allocations, strict=True):
            ref = next(e for e in entries if e.name == entry.name)
            if ref.resource_claim_template_name is not None:
                template = templates.get(f"{namespace}/{ref.resource_claim_template_name}")
                if template is None:
                    raise NotFoundError(
                        "does not exist", obj=f"ResourceClaimTemplate {ref.resource_claim_template_name}"
                    )
                existing = _existing(store, entry.resource_claim_name, namespace)
                if existing is not None:
                    # Made (and perhaps allocated) already: the pod adopts it as its own; the core
                    # joined its allocation, which `_written` checks. Undone, it is put back as found.
                    adopted = store.update(_adopted(existing, pod))
                    written = _written(store, adopted, pod, status)
                    done.append(Reserved(written, made=False, found=existing))
                    continue
                made = store.create(_made_claim(pod, entry, template))
                done.append(Reserved(_written(store, made, pod, status), made=True))
            else:
                claim = store.get(ResourceClaim, entry.resource_claim_name, namespace)
                done.append(Reserved(_written(store, claim, pod, status), made=False))
    except Exception:
        unreserve(store, pod, done)
        raise
    return done


def unreserve(store: Store, pod: Pod, written: Iterable[Reserved]) -> None:
    """Undoes `reserve` for a pod that was not created."""
    for item in written:
        if item.made:
            _drop(store, item.claim)
        elif item.found is not None:
            _put_back(store, item.found)
        else:
            _leave(store, item.claim.name, item.claim.namespace, pod.metadata.uid)


def _existing(store: Store, name: str, namespace: str) -> ResourceClaim | None:
    try:
        return store.get(ResourceClaim, name, namespace)
    except NotFoundError:
        return None


def _adopted(claim: ResourceClaim, pod: Pod) -> ResourceClaim:
    """The claim labelled as the pod's (so it goes with the pod, as one made for it) and protected."""
    labels = {**claim.metadata.labels, CLAIM_POD_LABEL: pod.name, WORKLOAD_LABEL: pod.spec.workload}
    finalizers = [*claim.metadata.finalizers]
    if DELETE_PROTECTION not in finalizers:
        finalizers.append(DELETE_PROTECTION)
    meta = claim.metadata.model_copy(update={"labels": labels, "finalizers": finalizers})
    return claim.model_copy(update={"metadata": meta})


def _put_back(store: Store, found: ResourceClaim) -> None:
    """An adopted claim as it was before the failed admission (its status, then its labels)."""
    with contextlib.suppress(NotFoundError, ConflictError):
        current = store.get(ResourceClaim, found.name, found.namespace)
        current = store.update_status(current.model_copy(update={"status": found.status}))
        meta = current.metadata.model_copy(
            update={"labels": found.metadata.labels, "finalizers": found.metadata.finalizers}
        )
        store.update(current.model_copy(update={"metadata": meta}))


def _made_claim(pod: Pod, entry: PodResourceClaimStatus, template: ResourceClaimTemplate) -> ResourceClaim:
    meta = template.spec.metadata
    labels = dict(meta.labels) if meta is not None else {}
    labels.update({CLAIM_POD_LABEL: pod.name, WORKLOAD_LABEL: pod.spec.workload})
    annotations = dict(meta.annotations) if meta is not None else {}
    annotations[POD_CLAIM_NAME_ANNOTATION] = entry.name
    return ResourceClaim(
        metadata=ObjectMeta(
            name=entry.resource_claim_name,
            namespace=pod.namespace,
            labels=labels,
            annotations=annotations,
            finalizers=[DELETE_PROTECTION],
        ),
        spec=template.spec.spec.model_copy(deep=True),
    )


def _written(store: Store, claim: ResourceClaim, pod: Pod, allocation: ClaimAllocation) -> ResourceClaim:
    if claim.metadata.deletion_timestamp is not None:
        raise ConflictError("is being deleted", obj=claim.describe())
    if DELETE_PROTECTION not in claim.metadata.finalizers:
        protected = [*claim.metadata.finalizers, DELETE_PROTECTION]
        claim = store.update(
            claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"finalizers": protected})})
        )
    status = claim.status.model_copy(deep=True)
    wanted = allocation.to_status()
    if status.allocation is None:
        status.allocation = wanted
    elif status.allocation.devices.results != wanted.devices.results:
        # Never re-allocated: the core joined the allocation it knew, which is no longer this one.
        raise ConflictError("is allocated other devices than the scheduler knew", obj=claim.describe())
    if all(r.uid != pod.metadata.uid for r in status.reserved_for):
        status.reserved_for.append(consumer(pod))
    return store.update_status(claim.model_copy(update={"status": status}))


def release_pod(store: Store, pod: Pod) -> list[tuple[ResourceClaim, bool]]:
    """The pod is deleted or finished: it leaves its claims' `reservedFor`, the claims made for it are
    deleted, and a shared claim reserved for no one any more is deallocated. Returns each claim changed,
    with whether it was deleted."""
    changed: list[tuple[ResourceClaim, bool]] = []
    for entry in pod.spec.resource_claims:
        try:
            claim = store.get(ResourceClaim, entry.resource_claim_name, pod.namespace)
        except NotFoundError:
            continue
        if made_for(claim, pod):
            _drop(store, claim)
            changed.append((claim, True))
            continue
        written = _leave(store, claim.name, claim.namespace, pod.metadata.uid, claim)
        if written is not None:
            changed.append((written, False))
    return changed


def made_for(claim: ResourceClaim, pod: Pod) -> bool:
    """Whether the claim was made from a template for this pod (by name: a pod of a later attempt has
    the same name and a claim of the same name, made again)."""
    return claim.metadata.labels.get(CLAIM_POD_LABEL) == pod.name and any(
        r.uid == pod.metadata.uid for r in claim.status.reserved_for
    )


def _leave(
    store: Store, name: str, namespace: str | None, uid: str | None, claim: ResourceClaim | None = None
) -> ResourceClaim | None:
    """Takes `uid` out of the claim's `reservedFor` (deallocating it if no one is left), reading the
    claim again on a conflicting write; the claim written, if it changed."""
    for _ in range(3):
        try:
            current = claim if claim is not None else store.get(ResourceClaim, name, namespace)
            cleared = unreserved(current, {uid} if uid else set())
            return None if cleared is None else _unprotected(store, store.update_status(cleared))
        except NotFoundError:
            return None
        except ConflictError:
            claim = None
    return None


def unreserved(claim: ResourceClaim, gone: set[str]) -> ResourceClaim | None:
    """The claim without the consumers whose uids are in `gone`, and deallocated when none is left; None
    when that changes nothing."""
    status = claim.status
    kept = [r for r in status.reserved_for if r.uid not in gone]
    allocation = status.allocation if kept else None
    if kept == status.reserved_for and allocation == status.allocation:
        return None
    changed = status.model_copy(update={"reserved_for": kept, "allocation": allocation})
    return claim.model_copy(update={"status": changed})


def collect(
    store: Store, stored: Iterable[ResourceClaim], pods: Iterable[Pod]
) -> list[tuple[ResourceClaim, bool]]:
    """What the resource-claim controller does for claims whose pods are gone (after a crash between
    writes): a consumer that is no live pod leaves `reservedFor`, a claim made for a pod that is gone is
    deleted, a claim reserved for no one is deallocated. Returns each claim changed, with whether it was
    deleted."""
    live = {p.metadata.uid for p in pods if not p.terminated and p.metadata.deletion_timestamp is None}
    changed: list[tuple[ResourceClaim, bool]] = []
    for claim in stored:
        owner = claim.metadata.labels.get(CLAIM_POD_LABEL)
        if owner is not None and not any(r.uid in live for r in claim.status.reserved_for):
            _drop(store, claim)
            changed.append((claim, True))
            continue
        cleared = unreserved(claim, {r.uid for r in claim.status.reserved_for if r.uid not in live})
        with contextlib.suppress(NotFoundError, ConflictError):
            written = store.update_status(cleared) if cleared is not None else claim
            kept = _unprotected(store, written)
            if kept is not claim:
                changed.append(
                    (kept, kept.metadata.deletion_timestamp is not None and not kept.metadata.finalizers)
                )
    return changed


def _unprotected(store: Store, claim: ResourceClaim) -> ResourceClaim:
    """The claim without its delete protection once it is deallocated (a delete asked meanwhile then
    completes)."""
    if claim.status.allocation is not None:
        return claim
    return _without_protection(store, claim)


def _without_protection(store: Store, claim: ResourceClaim) -> ResourceClaim:
    if DELETE_PROTECTION not in claim.metadata.finalizers:
        return claim
    finalizers = [f for f in claim.metadata.finalizers if f != DELETE_PROTECTION]
    return store.update(
        claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"finalizers": finalizers})})
    )


def _drop(store: Store, claim: ResourceClaim) -> None:
    """Deletes a claim made for a pod: its protection goes with the pod."""
    with contextlib.suppress(NotFoundError):
        held = store.delete(ResourceClaim, claim.name, claim.namespace)
        if isinstance(held, ResourceClaim):
            _without_protection(store, held)
