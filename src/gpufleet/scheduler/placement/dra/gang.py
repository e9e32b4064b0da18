"""DRA inside gang placement: which of a pod's candidate nodes can allocate its claims, what the chosen
node gives them, and the `DynamicResources` count of a pod set that fits nowhere.

The devices admitted pods hold are in the fleet's DeviceView and follow their allocations, so a gang's
second pod never gets the first one's devices, and a rolled-back attempt gives them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from weakref import WeakKeyDictionary

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.devices import DeviceId, NodeDevices
from gpufleet.fleet.dra_view import DeviceView
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.dra.allocate import PodClaim, attribute_value
from gpufleet.scheduler.placement.dra.cel import SelectorCache
from gpufleet.scheduler.placement.dra.demand import TYPE_ATTRIBUTE
from gpufleet.scheduler.placement.dra.nodes import DraFilterResult, filter_nodes
from gpufleet.scheduler.placement.dra.result import ClaimAllocation
from gpufleet.scheduler.workload import PodSet

RowArray = npt.NDArray[np.intp]
NO_DEVICES = "node publishes no devices"
INDEX_ATTRIBUTE = "gpu.nvidia.com/index"
PARENT_INDEX_ATTRIBUTE = "gpu.nvidia.com/parentIndex"

# One selector cache per device view: a verdict is keyed by (driver, pool, generation, device), which
# names a device's content within one cluster, not across fleets built side by side.
_CACHES: WeakKeyDictionary[DeviceView, SelectorCache] = WeakKeyDictionary()


def _cache(view: DeviceView) -> SelectorCache:
    cache = _CACHES.get(view)
    if cache is None:
        cache = _CACHES[view] = SelectorCache()
    return cache


def pod_claims(pod_set: PodSet, index: int) -> tuple[PodClaim, ...]:
    """The claims of the `index`-th pod of the set: its own, made from templates (`{key}-{index}`, with
    its stored allocation if it has one), and the shared ones, the same for every pod."""
    return tuple(
        c
        if c.shared
        else replace(
            c,
            key=f"{c.key}-{index}",
            allocation=c.per_pod[index] if index < len(c.per_pod) else None,
            per_pod=(),
        )
        for c in pod_set.claims
    )


def allocated_already(state: FleetState, claims: Sequence[PodClaim]) -> dict[str, ClaimAllocation]:
    """The pod's claims that are allocated already: a shared one by a pod placed before (in the view),
    else as the claim's stored status says; a pod's own one as its stored status says. They are joined
    as they are, never allocated again."""
    known: dict[str, ClaimAllocation] = {}
    for claim in claims:
        if not claim.shared:
            if claim.allocation is not None:
                known[claim.key] = claim.allocation
            continue
        entry = state.devices.shared.get(claim.key)
        allocation = entry.allocation if entry is not None else claim.allocation
        if allocation is not None:
            known[claim.key] = allocation
    return known


def others_allocated(pod_set: PodSet, index: int) -> frozenset[DeviceId]:
    """The devices the pod set's other pods' own claims were allocated already: theirs when those pods
    are placed, so not to be given to this pod meanwhile."""
    return frozenset(
        device
        for claim in pod_set.claims
        if not claim.shared
        for i, allocation in enumerate(claim.per_pod)
        if i != index and allocation is not None
        for device in allocation.held
    )


def joinable_rows(state: FleetState, known: dict[str, ClaimAllocation], rows: RowArray) -> RowArray:
    """The rows a pod using the allocated claims `known` may go to: the node their devices are local
    to (their node selector), and none if another pod or claim holds one of their devices."""
    in_use = state.devices.in_use
    for claim in known.values():
        if any(in_use.get(d, claim.claim) != claim.claim for d in claim.held):
            return rows[:0]
        rows = rows[[state.names[int(r)] == claim.node for r in rows]]
    return rows


def claim_rows(
    state: FleetState, claims: Sequence[PodClaim], rows: RowArray, reserved: frozenset[DeviceId] = frozenset()
) -> tuple[RowArray, DraFilterResult]:
    """The rows whose devices can give `claims` theirs now (not those in use, nor `reserved`), and the
    filter's answer for all of `rows`."""
    view = state.devices
    reachable = {state.names[r]: view.nodes[state.names[r]] for r in rows if state.names[r] in view.nodes}
    in_use = view.in_use.keys() | reserved if reserved else view.in_use.keys()
    result = filter_nodes(claims, reachable, classes=view.classes, in_use=in_use, cache=_cache(view))
    bare = len(rows) - len(reachable)
    if bare:
        result.rejected[NO_DEVICES] = bare
    kept = np.array([r for r in rows if state.names[int(r)] in result.fits], dtype=np.intp)
    return kept, result


def extended_rows(state: FleetState, rows: RowArray) -> RowArray:
    """The rows a pod asking GPUs as extended resources may use: not the nodes whose GPUs are published
    in ResourceSlices, which (as in Kubernetes, where such a node advertises no `nvidia.com/gpu`) hand
    their GPUs out through claims only, so a GPU is never held both ways."""
    view = state.devices
    return rows[
        [(name := state.names[int(r)]) not in view.nodes and name not in view.claims_only for r in rows]
    ]


def held_devices(claimed: Sequence[ClaimAllocation]) -> tuple[DeviceId, ...]:
    """The devices the pod takes: all it was allocated except admin access, which takes nothing."""
    return tuple(d for c in claimed for d in c.held)


def device_gpus(
    node: NodeDevices | None, claimed: Sequence[ClaimAllocation]
) -> tuple[tuple[int, ...], int | None]:
    """The GPU indices the allocated devices are (`index` of a whole GPU) and the GPU a MIG device is
    part of (`parentIndex`), so the fleet's GPU arrays record the very GPUs the claims got."""
    if node is None:
        return (), None
    by_id = {d.id: d for d in node.devices()}
    whole: list[int] = []
    parent: int | None = None
    for device_id in held_devices(claimed):
        device = by_id.get(device_id)
        if device is None:
            continue
        if attribute_value(device, TYPE_ATTRIBUTE) == "mig":
            value = attribute_value(device, PARENT_INDEX_ATTRIBUTE)
            parent = value if isinstance(value, int) and not isinstance(value, bool) else parent
        else:
            value = attribute_value(device, INDEX_ATTRIBUTE)
            if isinstance(value, int) and not isinstance(value, bool):
                whole.append(value)
    return tuple(whole), parent
