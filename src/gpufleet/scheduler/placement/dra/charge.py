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
  would allocate it by being admitted. Two pending workloads naming the same unallocated claim are
  both charged until one is admitted: each must have room for it, as either may be the one to take it.

Releasing the claim (its last pod leaves `reservedFor`) releases the charge with the workload's
usage; a restart reads `reservedFor` again and charges the same workload. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.placement.dra.allocate import PodClaim


def charged_to(reserved_by: Sequence[str], asking: str, workload_of: Callable[[str], str | None]) -> str:
    """The workload a shared claim is charged to. `reserved_by`: the pods (keys) of its `reservedFor`, in
    order; `asking`: the workload whose request is being derived; `workload_of`: a pod's workload, or
    None for a pod the scheduler does not place (another scheduler's, or gone)."""
    for pod in reserved_by:
        workload = workload_of(pod)
        if workload is not None:
            return workload
    return asking


def charged_claims(
    shared: Sequence[tuple[PodClaim, Sequence[str]]], asking: str, workload_of: Callable[[str], str | None]
) -> list[PodClaim]:
    """Of the shared claims a pod set names, with each one's `reservedFor` pods, those `asking` is
    charged for, each claim once (two entries naming the same claim are one claim)."""
    seen: set[str] = set()
    mine: list[PodClaim] = []
    for claim, reserved_by in shared:
        if claim.key in seen:
            continue
        seen.add(claim.key)
        if charged_to(reserved_by, asking, workload_of) == asking:
            mine.append(claim)
    return mine


def charge_request(gpus: int, mig: str | None, gpu_models: tuple[str, ...]) -> PodRequest | None:
    """The `PodSet.charge` for claims adding up to `gpus` whole GPUs or one `mig` instance."""
    if not gpus and mig is None:
        return None
    return PodRequest(gpus=gpus, mig=mig, gpu_models=gpu_models)
