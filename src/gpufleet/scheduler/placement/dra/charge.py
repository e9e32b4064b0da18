"""Who a shared ResourceClaim's devices are charged to: one rule for the embedded and Kubernetes worlds.

A claim named by several pods (`resourceClaimName`) is allocated once and holds its devices once, so
its GPUs count against quota once, not per pod and not never. Kubernetes' ResourceQuota does the same
(`<class>.deviceclass.resource.k8s.io/devices` is charged per ResourceClaim object, once, however
many pods use it); Kueue's DRA quota counts only claims made from ResourceClaimTemplates. We charge the
claim to one workload, the one a user expects to pay for it:

- while the claim is allocated and reserved, the workload of the first pod in `status.reservedFor`
  (Kubernetes appends to that list, so the first is the pod that reserved it first) whose workload is
  known;
- otherwise (not allocated yet, or reserved for no pod the scheduler knows) the workload asking, which
  would allocate it by being admitted. Two pending workloads naming the same unallocated claim both
  carry the charge; the cycle drops it from whichever comes second (`without_held`: the claim is then
  held in the fleet, charged to the one admitted first), so it is never charged twice.

Releasing the claim (its last pod leaves `reservedFor`) releases the charge with the workload's
usage; a restart reads `reservedFor` again and charges the same workload. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Iterable, Mapping, Sequence

from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.fleet.devices import PoolDevice
from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.placement.dra.allocate import PodClaim
from gpufleet.scheduler.placement.dra.cel import SelectorCache
from gpufleet.scheduler.placement.dra.demand import claim_demand, with_claims
from gpufleet.scheduler.workload import ClaimCharge, PodSet, Workload


def charged_to(reserved_by: Sequence[str], asking: str, workload_of: Callable[[str], str | None]) -> str:
    """The workload a shared claim is charged to. `reserved_by`: the pods (keys) of its `reservedFor`, in
    order; `asking`: the workload whose request is being derived; `workload_of`: a pod's workload, or
    None for a pod the scheduler does not place (another scheduler's, or gone)."""
    for pod in reserved_by:
        workload = workload_of(pod)
        if workload is not None:
            return workload
    return asking


def claim_charges(
    shared: Sequence[tuple[PodClaim, Sequence[str]]],
    asking: str,
    workload_of: Callable[[str], str | None],
    *,
    classes: Mapping[str, DeviceClassSpec],
    devices: Iterable[PoolDevice],
    model_of: Callable[[str], str],
    cache: SelectorCache | None = None,
) -> tuple[ClaimCharge, ...]:
    """The `PodSet.charges` of `asking`: of the shared claims a pod set names, each with its
    `reservedFor` pods, those charged to `asking`, with their GPUs (`claim_demand`), each claim once."""
    pool = list(devices)
    charges: dict[str, ClaimCharge] = {}
    for claim, reserved_by in shared:
        if claim.key in charges or charged_to(reserved_by, asking, workload_of) != asking:
            continue
        demand = claim_demand([claim], classes=classes, devices=pool, model_of=model_of, cache=cache)
        if demand.gpus or demand.mig is not None:
            request = PodRequest(gpus=demand.gpus, mig=demand.mig, gpu_models=demand.gpu_models)
            charges[claim.key] = ClaimCharge(claim.key, request)
    return tuple(charges.values())


def with_pod_claims(
    pod_set: PodSet,
    claims: Sequence[PodClaim],
    own: Sequence[PodClaim],
    *,
    asking: str,
    reserved_by: Callable[[str], Sequence[str]],
    workload_of: Callable[[str], str | None],
    classes: Mapping[str, DeviceClassSpec],
    devices: Iterable[PoolDevice],
    model_of: Callable[[str], str],
    cache: SelectorCache | None,
    where: str,
) -> PodSet:
    """The pod set of `asking` carrying the `claims` the core places: its request counts the GPUs of its
    pods' `own` claims (made from templates), and it is charged for the shared ones charged to it.
    `reserved_by`: a claim's `reservedFor` pods, in order, while it is allocated. Both worlds derive a
    pod set with claims here; they differ only in where claims and reservations are read from."""
    pool = list(devices)
    demand = claim_demand(own, classes=classes, devices=pool, model_of=model_of, cache=cache)
    request = with_claims(pod_set.request, demand, where=where)
    mine = {c.key for c in own}
    shared = [(c, reserved_by(c.key)) for c in claims if c.shared and c.key not in mine]
    charges = claim_charges(
        shared, asking, workload_of, classes=classes, devices=pool, model_of=model_of, cache=cache
    )
    return dataclasses.replace(pod_set, request=request, claims=tuple(claims), charges=charges)


def without_held(workload: Workload, held: Container[str]) -> Workload:
    """The workload without the charges of shared claims already `held` (allocated in the fleet, so
    charged to the workload that allocated them): what a cycle admits, so a claim two pending
    workloads carry is charged to the first one admitted only."""
    if not any(ps.charges for ps in workload.pod_sets):
        return workload
    sets = tuple(
        dataclasses.replace(ps, charges=tuple(c for c in ps.charges if c.claim not in held))
        for ps in workload.pod_sets
    )
    return dataclasses.replace(workload, pod_sets=sets)
