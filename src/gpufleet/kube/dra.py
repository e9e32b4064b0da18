"""The secondary scheduler's view of Dynamic Resource Allocation: DeviceClasses, ResourceSlices and
ResourceClaims (`resource.k8s.io/v1`) from informers, turned into what the scheduling core reads.

- Devices: each node's pools from every slice that reaches it (`fleet.devices.node_devices`), in slice
  name order, into the fleet's `DeviceView`, with the classes. A node that advertises no
  `nvidia.com/gpu` but publishes GPUs (as under NVIDIA's DRA driver) has as many GPUs in the fleet as
  its slices name (`gpu.nvidia.com/index`), so the core's GPU arrays can record the ones its claims get.
- Workloads: a pod's `spec.resourceClaims` become its pod set's `PodSet.claims`, in the entries' order.
  A claim made from a template (by the controller manager, named in `status.resourceClaimStatuses`)
  is the pod's own: its GPUs count in the pod's request (`dra.charge.with_pod_claims`, as in
  the embedded world), so quotas and flavors see them as any GPU. A named ResourceClaim is shared: held
  once by the claim and charged once, to the workload `dra.charge.charged_to` names (the first pod of
  its `reservedFor` that gpufleet places, else the workload asking), as its pod set's `charges`. A
  claim already allocated is handed to the core with its allocation, which it respects (never
  re-allocates): a shared one as the claim, a pod's own one per pod (`PodClaim.per_pod`), whatever
  the size of its pod set.
- Bound pods hold the devices their claims' `status.allocation` name (after a restart, or pods bound
  elsewhere).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpufleet.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpufleet.api.dra_devices import DeviceClassSpec, NodeSelector, ResourceSliceSpec
from gpufleet.api.errors import GpuFleetError
from gpufleet.api.kinds import kind_info
from gpufleet.fleet.devices import DeviceId, NodeDevices, node_devices
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.state import FleetState
from gpufleet.kube.claims import ClaimRef, claim_refs, product_model
from gpufleet.kube.informer import Informer, Informers, key_of
from gpufleet.kube.resources import resource_for
from gpufleet.kube.store import from_json
from gpufleet.kube.transport import Json
from gpufleet.scheduler.placement.dra import PodClaim, SelectorCache
from gpufleet.scheduler.placement.dra.allocate import attribute_value
from gpufleet.scheduler.placement.dra.charge import with_pod_claims
from gpufleet.scheduler.placement.dra.demand import TYPE_ATTRIBUTE
from gpufleet.scheduler.placement.dra.gang import INDEX_ATTRIBUTE
from gpufleet.scheduler.workload import PodSet, Workload

log = logging.getLogger(__name__)

CLAIMS_NOT_READY = "ClaimsNotReady"
INVALID_CLAIMS = "InvalidClaims"
DRIVER_GPU_TYPE = "gpu"
PRODUCT_ATTRIBUTE = "gpu.nvidia.com/productName"


class ClaimsNotReady(GpuFleetError):
    """A pod's claim is not made yet (the controller manager makes it from the template), or names a
    DeviceClass that does not exist: the pod waits, with this as its pending reason."""


def node_of(selector: NodeSelector | None) -> str | None:
    """The node an allocation is pinned to (`metadata.name In [node]`), if it is pinned to one."""
    for term in selector.node_selector_terms if selector is not None else ():
        for field in term.match_fields:
            if field.key == "metadata.name" and field.operator == "In" and len(field.values) == 1:
                return field.values[0]
    return None


def claim_model(obj: Json) -> ResourceClaim:
    info = kind_info("ResourceClaim")
    assert info is not None
    model = from_json(info, obj)
    assert isinstance(model, ResourceClaim)
    return model


def _model(kind: str, obj: Json) -> DeviceClass | ResourceSlice:
    info = kind_info(kind)
    assert info is not None
    model = from_json(info, obj)
    assert isinstance(model, DeviceClass | ResourceSlice)
    return model


def allocation_of(key: str, claim: ResourceClaim, node: str) -> ClaimAllocation | None:
    """The claim's stored allocation in the core's terms (pinned to `node` unless its selector says)."""
    allocation = claim.status.allocation
    if allocation is None:
        return None
    return ClaimAllocation.from_status(key, node_of(allocation.node_selector) or node, allocation)


@dataclasses.dataclass(slots=True)
class SliceIndex:
    by_node: dict[str, list[ResourceSliceSpec]] = dataclasses.field(default_factory=dict)
    shared: list[ResourceSliceSpec] = dataclasses.field(default_factory=list)


class KubeDra:
    """The DRA informers and what the scheduler's cache derives from them."""

    def __init__(self, informers: Informers) -> None:
        self.classes: Informer = informers.informer(resource_for("DeviceClass"))
        self.slices: Informer = informers.informer(resource_for("ResourceSlice"))
        self.claims: Informer = informers.informer(resource_for("ResourceClaim"))
        self._lock = threading.Lock()
        self._devices_changed = True
        self._marked: set[str] = set()
        self._waiting: set[str] = set()
        """Pods with claims seen before DRA's objects were listed."""
        self.users: dict[str, set[str]] = {}
        """Claim key -> the pods (keys) that name it, so that a claim's change brings them back."""
        self._selectors = SelectorCache()
        self._parsed: dict[str, tuple[str, ResourceSliceSpec | None]] = {}
        """Slice name -> (resourceVersion, spec): a slice is parsed once per version."""
        self.invalid: dict[str, str] = {}
        """Slices and classes left out, with why."""

    def informers(self) -> tuple[Informer, ...]:
        return (self.classes, self.slices, self.claims)

    @property
    def synced(self) -> bool:
        """Whether classes, slices and claims are all listed: until then no pod's claims are decided,
        since a device a bound pod's claim holds may not be known yet."""
        return all(i.synced for i in self.informers())

    # ------------------------------------------------------------------ informer handlers
    def devices_changed(self, event: str, old: Json | None, new: Json | None) -> None:
        with self._lock:
            self._devices_changed = True
            for users in self.users.values():  # a class that appears may unblock them
                self._marked |= users

    def claim_changed(self, event: str, old: Json | None, new: Json | None) -> None:
        obj = new or old
        if obj is None:
            return
        with self._lock:
            self._marked |= self.users.get(key_of(obj), set())

    def forget(self, pod_key: str, claims: Iterable[str]) -> None:
        """A deleted pod no longer uses `claims` (keys)."""
        with self._lock:
            for key in claims:
                users = self.users.get(key)
                if users is not None:
                    users.discard(pod_key)
                    if not users:
                        del self.users[key]

    def take_marked(self) -> tuple[bool, set[str]]:
        """(whether slices or classes changed, the pods whose claims changed) since the last call."""
        with self._lock:
            changed, self._devices_changed = self._devices_changed, False
            marked, self._marked = self._marked, set()
            if self._waiting and self.synced:  # listed now: the pods that waited for it look again
                marked |= self._waiting
                self._waiting = set()
        return changed, marked

    # ------------------------------------------------------------------ devices
    def _refuse(self, what: str, exc: GpuFleetError) -> None:
        """An object the API's models refuse is left out; said once per problem."""
        if self.invalid.get(what) != str(exc):
            log.warning("%s is left out of the devices: %s", what, exc)
        self.invalid[what] = str(exc)

    def slice_specs(self) -> list[ResourceSliceSpec]:
        out: list[ResourceSliceSpec] = []
        parsed: dict[str, tuple[str, ResourceSliceSpec | None]] = {}
        for obj in sorted(self.slices.items(), key=lambda s: s["metadata"]["name"]):
            name, version = obj["metadata"]["name"], str(obj["metadata"].get("resourceVersion", ""))
            known = self._parsed.get(name)
            if known is None or known[0] != version:
                try:
                    model = _model("ResourceSlice", obj)
                    assert isinstance(model, ResourceSlice)
                    known = (version, model.spec)
                    self.invalid.pop(f"ResourceSlice {name}", None)
                except GpuFleetError as exc:
                    self._refuse(f"ResourceSlice {name}", exc)
                    known = (version, None)
            parsed[name] = known
            if known[1] is not None:
                out.append(known[1])
        self._parsed = parsed
        return out

    def class_specs(self) -> dict[str, DeviceClassSpec]:
        out: dict[str, DeviceClassSpec] = {}
        for obj in self.classes.items():
            name = obj["metadata"]["name"]
            try:
                model = _model("DeviceClass", obj)
            except GpuFleetError as exc:
                self._refuse(f"DeviceClass {name}", exc)
                continue
            assert isinstance(model, DeviceClass)
            out[name] = model.spec
        return out

    def slice_index(self) -> SliceIndex:
        """The slices by the node they name, and those for any node (all nodes, or by selector), each in
        name order: a node's pools are derived from its own and the shared ones, not from every slice
        of the cluster (thousands of nodes, one slice or more each)."""
        index = SliceIndex()
        for spec in self.slice_specs():
            if spec.node_name is not None:
                index.by_node.setdefault(spec.node_name, []).append(spec)
            else:
                index.shared.append(spec)
        return index

    @staticmethod
    def node_pools(spec: NodeSpec, index: SliceIndex) -> NodeDevices:
        slices = [*index.by_node.get(spec.name, ()), *index.shared]
        return node_devices(slices, node_name=spec.name, labels=spec.labels)

    def node_spec(self, spec: NodeSpec, pools: NodeDevices) -> NodeSpec:
        """A node whose GPUs are published in slices rather than advertised: as many GPUs as they name."""
        if spec.gpus or not pools.pools:
            return spec
        indices: list[int] = []
        model = ""
        for device in pools.devices():
            index = attribute_value(device, INDEX_ATTRIBUTE)
            if attribute_value(device, TYPE_ATTRIBUTE) != DRIVER_GPU_TYPE or not isinstance(index, int):
                continue
            indices.append(index)
            product = attribute_value(device, PRODUCT_ATTRIBUTE)
            if isinstance(product, str) and not model:
                model = product_model(product)
        if not indices:
            return spec
        return dataclasses.replace(spec, gpus=max(indices) + 1, gpu_model=spec.gpu_model or model)

    # ------------------------------------------------------------------ workloads
    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        obj = self.claims.get(f"{namespace}/{name}")
        return claim_model(obj) if obj is not None else None

    def with_claims(
        self,
        workload: Workload,
        members: Mapping[str, Sequence[Json]],
        fleet: FleetState,
        workload_of: Callable[[str], str | None] = lambda _: None,
    ) -> Workload:
        """The workload whose pod sets carry their pods' claims and count their GPUs. `members`: each pod
        set's pods in the core's order; `workload_of`: a pod's (`namespace/name`) workload, to find whom
        a shared claim is charged to (`dra.charge`). Raises ClaimsNotReady (a claim not made yet, a class
        missing) or another GpuFleetError (claims the core cannot count)."""
        if not any(claim_refs(p) for pods in members.values() for p in pods):
            return workload
        if not self.synced:
            with self._lock:
                self._waiting |= {key_of(p) for pods in members.values() for p in pods}
            raise ClaimsNotReady(
                "DeviceClasses, ResourceSlices and ResourceClaims are not listed yet (resource.k8s.io/v1)",
                obj=f"workload {workload.name}",
            )
        devices = [d for node in fleet.devices.nodes.values() for d in node.devices()]
        sets: list[PodSet] = []
        for pod_set in workload.pod_sets:
            pods = members.get(pod_set.name, ())
            if not pods or not claim_refs(pods[0]):
                sets.append(pod_set)
                continue
            claims, own = self._pod_set_claims(workload.name, pod_set, pods, fleet)
            sets.append(
                with_pod_claims(
                    pod_set,
                    claims,
                    own,
                    asking=workload.name,
                    reserved_by=self._reserved_by,
                    workload_of=workload_of,
                    classes=fleet.devices.classes,
                    devices=devices,
                    model_of=product_model,
                    cache=self._selectors,
                    where=f"Pod {key_of(pods[0])}",
                )
            )
        return dataclasses.replace(workload, pod_sets=tuple(sets))

    def _reserved_by(self, key: str) -> list[str]:
        """The pods (`namespace/name`) a claim is reserved for while allocated, in order."""
        namespace, _, name = key.partition("/")
        stored = self.claim(namespace, name)
        if stored is None or stored.status.allocation is None:
            return []
        return [f"{namespace}/{r.name}" for r in stored.status.reserved_for if r.resource == "pods"]

    def _pod_set_claims(
        self, name: str, pod_set: PodSet, pods: Sequence[Json], fleet: FleetState
    ) -> tuple[list[PodClaim], list[PodClaim]]:
        """(the claims the core places, the pod's own claims whose GPUs its request counts)."""
        first = pods[0]
        namespace = first["metadata"].get("namespace") or "default"
        refs_of = {key_of(p): claim_refs(p) for p in pods}
        for pod_key, refs in refs_of.items():
            for ref in refs:
                if ref.claim is not None:
                    self.users.setdefault(f"{namespace}/{ref.claim}", set()).add(pod_key)
        claims: list[PodClaim] = []
        own: list[PodClaim] = []
        for index, ref in enumerate(refs_of[key_of(first)]):
            stored = self._stored(first, ref)
            # Every pod's claim must exist before the set is placed; one allocated already (a previous
            # run, another scheduler) is respected: the core keeps it and pins its pod to its node.
            per_pod: list[ClaimAllocation | None] = []
            for pod in pods:
                refs = refs_of[key_of(pod)]
                mine = self._stored(pod, refs[index]) if index < len(refs) else None
                node = pod.get("spec", {}).get("nodeName") or ""
                per_pod.append(allocation_of(f"{namespace}/{mine.name}", mine, node) if mine else None)
            self._check_classes(name, stored, fleet)
            key = f"{namespace}/{stored.name}"
            known = per_pod[0]
            if ref.template is None:
                placed = PodClaim(key, namespace, stored.spec, shared=True, allocation=known)
            else:
                # The core names pod i's claim `{key}-{i}`; the carrier maps it back to the pod's own.
                core_key = f"{namespace}/{pod_set.name}-{ref.name}"
                placed = PodClaim(core_key, namespace, stored.spec, per_pod=tuple(per_pod))
            claims.append(placed)
            if ref.template is not None:
                own.append(PodClaim(key, namespace, stored.spec))
        return claims, own

    def _stored(self, pod: Json, ref: ClaimRef) -> ResourceClaim:
        namespace = pod["metadata"].get("namespace") or "default"
        if ref.claim is None:
            raise ClaimsNotReady(
                f"the ResourceClaim of entry {ref.name} (from ResourceClaimTemplate {ref.template}) "
                "is not made yet",
                obj=f"Pod {key_of(pod)}",
                field="status.resourceClaimStatuses",
            )
        stored = self.claim(namespace, ref.claim)
        if stored is None:
            raise ClaimsNotReady(
                f"ResourceClaim {namespace}/{ref.claim} does not exist", obj=f"Pod {key_of(pod)}"
            )
        return stored

    @staticmethod
    def _check_classes(workload: str, claim: ResourceClaim, fleet: FleetState) -> None:
        for request in claim.spec.devices.requests:
            for _, exact in request.alternatives:  # every alternative's class, as for an exact request
                wanted = exact.device_class_name
                if wanted in fleet.devices.classes:
                    continue
                raise ClaimsNotReady(
                    f"DeviceClass {wanted} does not exist (ResourceClaim {claim.namespace}/{claim.name}, "
                    f"request {request.name})",
                    obj=f"workload {workload}",
                )

    def allocated(self) -> dict[str, tuple[DeviceId, ...]]:
        """Every allocated claim (`namespace/name`) with the devices it takes (not those given for admin
        access), read from the informer's objects as they are (no model: this runs every pass)."""
        out: dict[str, tuple[DeviceId, ...]] = {}
        for obj in self.claims.items():
            allocation = (obj.get("status") or {}).get("allocation")
            if not allocation:
                continue
            results = (allocation.get("devices") or {}).get("results") or []
            out[key_of(obj)] = tuple(
                (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
                for r in results
                if not r.get("adminAccess")
            )
        return out

    # ------------------------------------------------------------------ bound pods
    def held_by(self, pod: Json, node: str) -> tuple[tuple[DeviceId, ...], tuple[ClaimAllocation, ...]]:
        """What a bound pod holds through its claims, from their status: its own claims' devices, and
        the shared claims it uses. Claims not allocated (not yet seen, or cleared) hold nothing."""
        namespace = pod["metadata"].get("namespace") or "default"
        own: list[DeviceId] = []
        shared: list[ClaimAllocation] = []
        for ref in claim_refs(pod):
            if ref.claim is None:
                continue
            key = f"{namespace}/{ref.claim}"
            self.users.setdefault(key, set()).add(key_of(pod))
            stored = self.claim(namespace, ref.claim)
            known = allocation_of(key, stored, node) if stored is not None else None
            if known is None:
                continue
            if ref.template is not None:
                own.extend(known.held)
            else:
                shared.append(known)
        return tuple(own), tuple(shared)
