"""What the embedded scheduler knows of ResourceClaims and ResourceClaimTemplates, and the core
workload of a Workload whose pods name claims (`resourceClaims` in their template).

The core counts a pod's own claims (those made from templates) in its request, through
`dra.charge.with_pod_claims` (as the Kubernetes world does), so queues, quotas and flavors see their
GPUs as any GPU; a shared claim (named by several pods) is held once by the claim and charged once,
to the one workload `dra.charge.charged_to` names (the pod set's `charges`, not each pod's request).
A claim already allocated is handed to the core with its allocation, which it respects: a shared
one, and a pod's own one (the claim of the name pod `i` gets, `claims.template_claim_name`, made and
allocated before: by another scheduler, or kept from an earlier admission), which `claims.reserve`
adopts for the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from gpufleet.api.dra import ResourceClaim, ResourceClaimTemplate
from gpufleet.api.dra_devices import NodeSelector
from gpufleet.api.errors import GpuFleetError, NotFoundError
from gpufleet.api.gpu_models import canonical_name
from gpufleet.api.runtime import Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers import claims, convert
from gpufleet.fleet.devices import DeviceId
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.dra import PodClaim, SelectorCache
from gpufleet.scheduler.placement.dra.charge import with_pod_claims
from gpufleet.scheduler.workload import PodSet, Workload
from gpufleet.store.protocol import Store


class ClaimsNotReady(GpuFleetError):
    """A workload's pods name a claim or template that does not exist (yet), or a class that does not:
    it waits, with this as its pending reason."""


def key_of(obj: ResourceClaim | ResourceClaimTemplate) -> str:
    return convert.workload_key(obj.namespace, obj.name)


def node_of(selector: NodeSelector | None) -> str | None:
    """The node an allocation is pinned to (`metadata.name In [node]`), if it is pinned to one."""
    for term in selector.node_selector_terms if selector is not None else ():
        for field in term.match_fields:
            if field.key == "metadata.name" and field.operator == "In" and len(field.values) == 1:
                return field.values[0]
    return None


class ClaimSync:
    """The stored claims and templates, by `namespace/name`."""

    def __init__(self) -> None:
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self._cache = SelectorCache()

    def load(self, store: Store) -> None:
        self.claims = {key_of(c): c for c in store.list(ResourceClaim)}
        self.templates = {key_of(t): t for t in store.list(ResourceClaimTemplate)}

    def observe(self, obj: ResourceClaim | ResourceClaimTemplate, *, deleted: bool) -> None:
        table: dict[str, ResourceClaim] | dict[str, ResourceClaimTemplate]
        table = self.claims if isinstance(obj, ResourceClaim) else self.templates
        if deleted:
            table.pop(key_of(obj), None)
        else:
            table[key_of(obj)] = obj  # type: ignore[assignment]

    def written(self, claim: ResourceClaim) -> None:
        """Our own write, seen at once (its watch event comes later)."""
        self.claims[key_of(claim)] = claim

    # ------------------------------------------------------------------- workloads
    def core_workload(
        self,
        obj: WorkloadObject,
        fleet: FleetState,
        workload_of: Callable[[str], str | None] = lambda _: None,
    ) -> Workload:
        """The core workload, its pod sets carrying their claims. Raises ClaimsNotReady for a missing
        template, claim or class, a ValidationError for claims the core cannot count. `workload_of`: the
        workload (key) of a pod (`namespace/name`), to find whom a shared claim is charged to."""
        base = convert.core_workload(obj)
        if not any(ps.request.resource_claims for ps in obj.spec.pod_sets):
            return base
        key = base.name
        namespace, name = convert.split_key(key)
        devices = [d for node in fleet.devices.nodes.values() for d in node.devices()]
        pod_sets: list[PodSet] = []
        for spec, pod_set in zip(obj.spec.pod_sets, base.pod_sets, strict=True):
            entries = spec.request.resource_claims
            made: list[PodClaim] = []
            for entry in entries:
                if entry.resource_claim_template_name is not None:
                    template = self.templates.get(f"{namespace}/{entry.resource_claim_template_name}")
                    if template is None:
                        raise ClaimsNotReady(
                            f"ResourceClaimTemplate {namespace}/{entry.resource_claim_template_name} "
                            "does not exist",
                            obj=f"Workload {key}",
                            field=f"spec.podSets[{pod_set.name}].request.template.spec.resourceClaims",
                        )
                    prefix = f"{namespace}/{claims.template_claim_prefix(name, pod_set.name, entry.name)}"
                    # Pod i's claim, if it exists allocated already, is respected (placement.dra.gang).
                    per_pod = tuple(self._allocated(f"{prefix}-{i}") for i in range(pod_set.count))
                    made.append(PodClaim(prefix, namespace, template.spec.spec, per_pod=per_pod))
                else:
                    made.append(self._shared(key, namespace, entry.resource_claim_name or ""))
            own = [c for c in made if not c.shared]
            for claim in made:
                for device_request in claim.spec.devices.requests:
                    for _, exact in device_request.alternatives:
                        wanted = exact.device_class_name
                        if wanted in fleet.devices.classes:
                            continue
                        raise ClaimsNotReady(
                            f"DeviceClass {wanted} does not exist (ResourceClaim {claim.key}, request "
                            f"{device_request.name})",
                            obj=f"Workload {key}",
                        )
            pod_sets.append(
                with_pod_claims(
                    pod_set,
                    made,
                    own,
                    asking=key,
                    reserved_by=self._reserved_by,
                    workload_of=workload_of,
                    classes=fleet.devices.classes,
                    devices=devices,
                    model_of=canonical_name,
                    cache=self._cache,
                    where=f"Workload {key} pod set {pod_set.name}",
                )
            )
        return replace(base, pod_sets=tuple(pod_sets))

    def _reserved_by(self, key: str) -> list[str]:
        """The pods (`namespace/name`) a stored claim is reserved for while allocated, in order."""
        stored = self.claims.get(key)
        if stored is None or stored.status.allocation is None:
            return []
        return [f"{stored.namespace}/{r.name}" for r in stored.status.reserved_for if r.resource == "pods"]

    def _allocated(self, key: str) -> ClaimAllocation | None:
        """The stored allocation of the claim `key`, if it exists and is allocated to a node."""
        stored = self.claims.get(key)
        allocation = stored.status.allocation if stored is not None else None
        node = node_of(allocation.node_selector) if allocation is not None else None
        if allocation is None or node is None:
            return None
        return ClaimAllocation.from_status(key, node, allocation)

    def _shared(self, workload: str, namespace: str, name: str) -> PodClaim:
        stored = self.claims.get(f"{namespace}/{name}")
        if stored is None or stored.metadata.deletion_timestamp is not None:
            state = "does not exist" if stored is None else "is being deleted"
            raise ClaimsNotReady(f"ResourceClaim {namespace}/{name} {state}", obj=f"Workload {workload}")
        key = key_of(stored)
        allocation = stored.status.allocation
        node = node_of(allocation.node_selector) if allocation is not None else None
        known = None
        if allocation is not None and node is not None:
            known = ClaimAllocation.from_status(key, node, allocation)
        return PodClaim(key, namespace, stored.spec, shared=True, allocation=known)

    # ------------------------------------------------------------------------ pods
    def pod_devices(self, pod: Pod) -> tuple[tuple[DeviceId, ...], tuple[ClaimAllocation, ...]]:
        """What a bound pod holds through its claims, from their stored status (after a restart): its
        own claims' devices, and the shared claims it uses. Raises NotFoundError when a claim is gone,
        not allocated or not reserved for the pod: the pod cannot be trusted to hold its devices."""
        own: list[DeviceId] = []
        shared: list[ClaimAllocation] = []
        namespace = pod.namespace or "default"
        for entry in pod.spec.resource_claims:
            key = f"{namespace}/{entry.resource_claim_name}"
            claim = self.claims.get(key)
            allocation = claim.status.allocation if claim is not None else None
            node = node_of(allocation.node_selector) if allocation is not None else None
            reserved = claim is not None and any(r.uid == pod.metadata.uid for r in claim.status.reserved_for)
            if claim is None or allocation is None or not reserved:
                raise NotFoundError("is not allocated and reserved for the pod", obj=f"ResourceClaim {key}")
            held = ClaimAllocation.from_status(key, node or pod.spec.node_name, allocation)
            if claims.made_for(claim, pod):
                own.extend(held.held)
            else:
                shared.append(held)
        return tuple(own), tuple(shared)

    def conflict(self, allocations: Iterable[ClaimAllocation]) -> tuple[str, tuple[DeviceId, ...]] | None:
        """A stored claim other than these that holds one of their devices (one not yet deallocated
        after its pods left), with all its devices: allocating one again would give it to two claims."""
        wanted = {d: a.claim for a in allocations for d in a.held}
        if not wanted:
            return None
        for key, claim in self.claims.items():
            allocation = claim.status.allocation
            if allocation is None:
                continue
            held = tuple(
                (r.driver, r.pool, r.device) for r in allocation.devices.results if not r.admin_access
            )
            if any(wanted.get(d, key) != key for d in held):
                return key, held
        return None
