"""Allocating a pod's ResourceClaims from one node's devices, as kube-scheduler's DynamicResources plugin
does (its structured allocator), as a pure function.

For each request of each claim the candidates are the devices of the node's pools that satisfy every
selector of the request's DeviceClass and then of the request (CEL, `cel.py`). A depth-first search then
picks devices slot by slot (a slot is one device of one request), in the node's device order, so the
answer is deterministic:

- a device is never given twice, nor given if another claim holds it (`in_use`), except to a request
  with `adminAccess`, which is only honoured where the claim's namespace allows it and which neither
  takes the device nor consumes its counters;
- the shared counters of partitionable devices (a GPU's memory slices, taken by its MIG partitions)
  are never exceeded, counting what the devices in use already consume;
- `matchAttribute` constraints: every device of the requests they name has the attribute, with one
  value per claim; `distinctAttribute` constraints: every such device has it, each with a value of its
  own (as kube-scheduler's allocator checks both, per claim);
- a `firstAvailable` request gets its first alternative that can be allocated with the rest;
- `allocationMode: All` takes every matching device of the node (at least one; none may be in use, and
  not from a pool whose slices are not all published yet).

The search is bounded (`max_steps`); a node where the bound is hit is reported as not fitting, with why.
"""

from __future__ import annotations

import itertools
from collections import Counter as Tally
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from gpufleet.api.dra_claims import (
    DeviceAllocationConfiguration,
    DeviceConstraint,
    ExactDeviceRequest,
    ResourceClaimSpec,
)
from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.fleet.devices import CounterId, DeviceId, NodeDevices, PoolDevice, pinned_to
from gpufleet.scheduler.placement.dra.cel import SelectorCache, split_name
from gpufleet.scheduler.placement.dra.result import AllocatedDevice, ClaimAllocation, DraUnsatisfied

IN_USE = "allocated to other claims"
COUNTERS = "shared counters"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label (value "true") that allows admin access, as in Kubernetes."""
DEFAULT_MAX_STEPS = 100_000


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A claim of the pod being placed, as the allocator needs it (the world reads it from a
    ResourceClaim, or from the template a claim will be made from)."""

    key: str
    """`namespace/name`, as results and reasons name the claim."""
    namespace: str
    spec: ResourceClaimSpec
    shared: bool = False
    """A ResourceClaim the pods name (`resourceClaimName`), the same claim for each of them: allocated
    once, by the first pod placed, and the others follow it to its node. Otherwise each pod gets its own
    claim made from a template (`placement.dra.gang.pod_claims`)."""
    allocation: ClaimAllocation | None = None
    """A claim already allocated (its stored `status.allocation`): respected, never redone. For a
    shared claim, set by the world; for a pod's own claim, `placement.dra.gang.pod_claims` sets it
    from `per_pod`."""
    per_pod: tuple[ClaimAllocation | None, ...] = ()
    """A claim made from a template: the stored allocation of each pod's own claim (pod `i` at index
    `i`; None or absent where not allocated yet), so a pod whose claim was allocated before (a previous
    run, another scheduler) keeps it and goes to its node, whatever its place in the pod set."""


@dataclass(frozen=True, slots=True)
class _Choice:
    """What one request of a claim is allocated as: the request itself, or one of its `firstAvailable`
    alternatives (`name` is then `<request>/<alternative>`, as the results name it)."""

    name: str
    parent: str
    """The claim's request it belongs to (the same as `name` for an exact request)."""
    exact: ExactDeviceRequest


@dataclass(frozen=True, slots=True)
class _Slot:
    claim_index: int
    request: _Choice
    ordinal: int
    """Which device of the request this slot is (0-based)."""
    candidates: tuple[PoolDevice, ...]


@dataclass
class _Search:
    """The state of one depth-first search over the slots."""

    slots: list[_Slot]
    claims: Sequence[PodClaim]
    in_use: frozenset[DeviceId]
    free: dict[CounterId, Decimal]
    max_steps: int
    chosen: list[PoolDevice] = field(default_factory=list)
    taken: set[DeviceId] = field(default_factory=set)
    steps: int = 0
    deepest: int = 0
    turned_away: Tally[tuple[int, str]] = field(default_factory=Tally)
    """(slot, check) -> devices the check refused while filling that slot."""

    def run(self, depth: int = 0) -> bool:
        if depth == len(self.slots):
            return True
        self.deepest = max(self.deepest, depth)
        slot = self.slots[depth]
        admin = bool(slot.request.exact.admin_access)
        start = self._first_index(depth)
        for index in range(start, len(slot.candidates)):
            self.steps += 1
            if self.steps > self.max_steps:
                return False
            device = slot.candidates[index]
            if device.id in self.taken:
                continue
            check = self._refusal(slot, device, admin)
            if check is not None:
                self.turned_away[(depth, check)] += 1
                continue
            use = {} if admin else device.consumption()
            self._take(device, use)
            if self.run(depth + 1):
                return True
            self._give_back(device, use)
        return False

    def _first_index(self, depth: int) -> int:
        # Devices of one request are picked in candidate order, so that {a, b} is not tried again as
        # {b, a}: the slot after a request's previous slot starts after that slot's device.
        slot = self.slots[depth]
        if slot.ordinal == 0:
            return 0
        previous = self.chosen[depth - 1]
        return slot.candidates.index(previous) + 1

    def _refusal(self, slot: _Slot, device: PoolDevice, admin: bool) -> str | None:
        if not admin:
            if device.id in self.in_use:
                return IN_USE
            for counter, amount in device.consumption().items():
                if self.free.get(counter, Decimal(0)) < amount:
                    return COUNTERS
        claim = self.claims[slot.claim_index]
        for constraint in claim.spec.devices.constraints:
            if not _applies(constraint, slot.request):
                continue
            # matchAttribute: one value across the devices; distinctAttribute: a value of its own each.
            same = constraint.match_attribute is not None
            attribute = constraint.match_attribute if same else constraint.distinct_attribute
            assert attribute is not None
            check = f"{'matchAttribute' if same else 'distinctAttribute'} {attribute}"
            mine = attribute_value(device, attribute)
            if mine is None:
                return check
            for other_slot, other in zip(self.slots, self.chosen, strict=False):
                if other_slot.claim_index != slot.claim_index or not _applies(constraint, other_slot.request):
                    continue
                if (attribute_value(other, attribute) == mine) != same:
                    return check
        return None

    def _take(self, device: PoolDevice, use: Mapping[CounterId, Decimal]) -> None:
        self.chosen.append(device)
        self.taken.add(device.id)
        for counter, amount in use.items():
            self.free[counter] -= amount

    def _give_back(self, device: PoolDevice, use: Mapping[CounterId, Decimal]) -> None:
        self.chosen.pop()
        self.taken.discard(device.id)
        for counter, amount in use.items():
            self.free[counter] += amount


def _applies(constraint: DeviceConstraint, request: _Choice) -> bool:
    """A constraint names requests, or alternatives of one (`<request>/<alternative>`); none = all."""
    return (
        not constraint.requests
        or request.name in constraint.requests
        or request.parent in constraint.requests
    )


def attribute_value(device: PoolDevice, qualified: str) -> object | None:
    """The value of a device's attribute by its qualified name (`gpu.nvidia.com/cliqueId`); an attribute
    published unqualified belongs to the driver's domain."""
    domain, name = split_name(qualified, device.driver)
    for key, attribute in device.device.attributes.items():
        if split_name(key, device.driver) == (domain, name):
            return attribute.value
    return None


def free_counters(node: NodeDevices, in_use: Collection[DeviceId]) -> dict[CounterId, Decimal]:
    """What is left of the node's counters once the devices in use have taken their share."""
    free = node.counters()
    held = set(in_use)
    for device in node.devices():
        if device.id in held:
            for counter, amount in device.consumption().items():
                free[counter] = free.get(counter, Decimal(0)) - amount
    return free


def allocate_claims(
    claims: Sequence[PodClaim],
    *,
    node_name: str,
    node: NodeDevices,
    classes: Mapping[str, DeviceClassSpec],
    in_use: Collection[DeviceId] = (),
    admin_namespaces: Collection[str] = (),
    cache: SelectorCache | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> list[ClaimAllocation] | DraUnsatisfied:
    """Allocates every claim in `claims` (those of one pod not allocated yet) on `node_name`.

    `in_use` are the devices other claims hold; `admin_namespaces` the namespaces whose claims may ask
    for admin access. Returns one allocation per claim, in order, or why they cannot all be met.

    A `firstAvailable` request is allocated as its first alternative that can be, with the rest of the
    claims: the combinations of alternatives are tried in order of preference, the first request's
    choice changing slowest (as kube-scheduler's allocator backtracks), all within `max_steps`. The
    reason, when none fits, is the preferred combination's.
    """
    selectors = cache if cache is not None else SelectorCache()
    held = frozenset(in_use)
    requests = [(i, r) for i, claim in enumerate(claims) for r in claim.spec.devices.requests]
    options = [
        [_Choice(name, request.name, exact) for name, exact in request.alternatives]
        for _, request in requests
    ]
    first: DraUnsatisfied | None = None
    steps = max_steps
    for combination in itertools.product(*options):
        slots: list[_Slot] = []
        unmet: DraUnsatisfied | None = None
        for (claim_index, _), choice in zip(requests, combination, strict=True):
            made = _slots_of(
                claim_index, claims[claim_index], choice, node, classes, held, admin_namespaces, selectors
            )
            if isinstance(made, DraUnsatisfied):
                unmet = made
                break
            slots.extend(made)
        if unmet is None:
            search = _Search(slots, claims, held, free_counters(node, held), steps)
            if search.run():
                return _allocations(claims, slots, search.chosen, node_name, classes, combination)
            steps -= search.steps
            unmet = _search_failure(search)
        first = first or unmet
        if steps <= 0:
            break
    assert first is not None
    return first


def _slots_of(
    claim_index: int,
    claim: PodClaim,
    request: _Choice,
    node: NodeDevices,
    classes: Mapping[str, DeviceClassSpec],
    in_use: frozenset[DeviceId],
    admin_namespaces: Collection[str],
    cache: SelectorCache,
) -> list[_Slot] | DraUnsatisfied:
    """The request's slots with their candidates, or why the request cannot be met on this node."""
    exact = request.exact
    key = claim.key

    def unsatisfied(wanted: int, rejected: Mapping[str, int], message: str) -> DraUnsatisfied:
        return DraUnsatisfied(key, request.name, exact.device_class_name, wanted, dict(rejected), message)

    device_class = classes.get(exact.device_class_name)
    if device_class is None:
        return unsatisfied(exact.wanted, {}, f"DeviceClass {exact.device_class_name} does not exist")
    if exact.admin_access and claim.namespace not in admin_namespaces:
        return unsatisfied(
            exact.wanted,
            {},
            f"admin access is not allowed in namespace {claim.namespace} "
            f"(label it {ADMIN_ACCESS_LABEL}=true)",
        )
    expressions = [(f"class selector {i}", s.cel.expression) for i, s in enumerate(device_class.selectors)]
    expressions += [(f"request selector {i}", s.cel.expression) for i, s in enumerate(exact.selectors)]
    rejected: Tally[str] = Tally()
    errors: list[str] = []
    matching: list[PoolDevice] = []
    for device in node.devices():
        refused = None
        for label, expression in expressions:
            verdict = cache.evaluate(
                expression, (device.driver, device.pool, device.generation, device.device.name), device.device
            )
            if not verdict.matched:
                refused = label
                if verdict.error and len(errors) < 3:
                    errors.append(f"{label} on {device.pool}/{device.device.name}: {verdict.error}")
                break
        if refused is not None:
            rejected[refused] += 1
        else:
            matching.append(device)
    errors_text = "; CEL errors: " + "; ".join(errors) if errors else ""
    admin = bool(exact.admin_access)
    if exact.allocation_mode == "All":
        pools = {(d.driver, d.pool) for d in matching}
        incomplete = sorted(
            f"{p.driver}/{p.name}" for p in node.pools if (p.driver, p.name) in pools and not p.complete
        )
        busy = [] if admin else [d for d in matching if d.id in in_use]
        if not matching or incomplete or busy:
            if busy:
                rejected[IN_USE] += len(busy)
            why = (
                "no device matches"
                if not matching
                else f"pools {', '.join(incomplete)} are not fully published"
                if incomplete
                else "allocationMode All needs every matching device, and some are in use"
            )
            return unsatisfied(max(len(matching), 1), rejected, why + errors_text)
        return [_Slot(claim_index, request, i, tuple(matching)) for i in range(len(matching))]
    available = matching if admin else [d for d in matching if d.id not in in_use]
    if len(available) < len(matching):
        rejected[IN_USE] += len(matching) - len(available)
    if len(available) < exact.wanted:
        return unsatisfied(
            exact.wanted, rejected, f"{len(available)} of the node's devices match and are free" + errors_text
        )
    return [_Slot(claim_index, request, i, tuple(available)) for i in range(exact.wanted)]


def _search_failure(search: _Search) -> DraUnsatisfied:
    """The reason names the request of the deepest slot the search could not fill."""
    depth = min(search.deepest, len(search.slots) - 1)
    slot = search.slots[depth]
    claim = search.claims[slot.claim_index]
    exact = slot.request.exact
    rejected: Tally[str] = Tally()
    for (at, check), n in search.turned_away.items():
        if search.slots[at].request is slot.request and search.slots[at].claim_index == slot.claim_index:
            rejected[check] += n
    gave_up = search.steps > search.max_steps
    message = (
        f"the search gave up after {search.max_steps} steps"
        if gave_up
        else "no combination of the matching devices meets the shared counters and constraints"
    )
    wanted = sum(1 for s in search.slots if s.request is slot.request and s.claim_index == slot.claim_index)
    return DraUnsatisfied(
        claim.key, slot.request.name, exact.device_class_name, wanted, dict(rejected), message
    )


def _allocations(
    claims: Sequence[PodClaim],
    slots: Sequence[_Slot],
    chosen: Sequence[PoolDevice],
    node_name: str,
    classes: Mapping[str, DeviceClassSpec],
    combination: Sequence[_Choice],
) -> list[ClaimAllocation]:
    # Every device here is one the node reaches; the pod runs on this node, so the allocation pins it
    # there (kube-scheduler does the same for node-local slices).
    selector = pinned_to(node_name)
    out: list[ClaimAllocation] = []
    for index, claim in enumerate(claims):
        devices = tuple(
            AllocatedDevice(
                request=slot.request.name,
                driver=device.driver,
                pool=device.pool,
                device=device.device.name,
                admin_access=bool(slot.request.exact.admin_access),
            )
            for slot, device in zip(slots, chosen, strict=True)
            if slot.claim_index == index
        )
        mine = [c for c in combination if any(c.parent == r.name for r in claim.spec.devices.requests)]
        out.append(ClaimAllocation(claim.key, devices, selector, _config(claim, classes, mine), node_name))
    return out


def _config(
    claim: PodClaim, classes: Mapping[str, DeviceClassSpec], chosen: Sequence[_Choice]
) -> tuple[DeviceAllocationConfiguration, ...]:
    """The drivers' configuration: the classes' first (per request, as allocated: an alternative under
    its `<request>/<alternative>` name), then the claim's own."""
    config: list[DeviceAllocationConfiguration] = []
    for choice in chosen:
        for entry in classes[choice.exact.device_class_name].config:
            config.append(
                DeviceAllocationConfiguration(source="FromClass", requests=[choice.name], opaque=entry.opaque)
            )
    for claim_entry in claim.spec.devices.config:
        config.append(
            DeviceAllocationConfiguration(
                source="FromClaim", requests=claim_entry.requests, opaque=claim_entry.opaque
            )
        )
    return tuple(config)
