"""A shared ResourceClaim's quota charge moving on when the workload charged for it leaves.

A claim named by several pods is charged once, to one workload (`placement.dra.charge`: the first that
reserved it). When that workload ends or is evicted while pods of other workloads still use the claim,
the claim keeps its devices, so someone must go on paying for them: the charge moves to the workload
that reserved it next, i.e. of the admitted workloads still using it, the one admitted first (then by
name: deterministic). Kubernetes appends to `reservedFor` as pods reserve the claim, so this is the
workload a restarted scheduler finds first there, and both worlds agree after a restart.

The receiver is already running: its queue may go over its nominal quota by the move, which makes it a
borrower (reclaimable) rather than refusing a charge for devices it already uses. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from gpufleet.fleet.dra_view import DeviceView
from gpufleet.scheduler.flavors import Assignment, usage_of
from gpufleet.scheduler.workload import ClaimCharge, PodSet, Workload


@dataclasses.dataclass(frozen=True, slots=True)
class Move:
    """The charge of `claim` goes to workload `to`."""

    to: str
    charge: ClaimCharge


def moves(
    leaving: Workload, counts: tuple[int, ...], devices: DeviceView, admitted: Mapping[str, Workload]
) -> list[Move]:
    """Where the charges of `leaving` (admitted with `counts` pods per pod set) go, once its pods have
    left the fleet: each shared claim it paid for that other pods still use goes to the admitted
    workload (of `admitted`, by name) that uses it and was admitted first."""
    out: list[Move] = []
    owner: dict[str, str] | None = None
    for pod_set, count in zip(leaving.pod_sets, counts, strict=True):
        for charge in pod_set.charges if count else ():
            entry = devices.shared.get(charge.claim)
            if entry is None or not entry.users:
                continue  # released with its last pod: no one pays, nothing is held
            if owner is None:  # pod -> workload, built once, only when a charge may move
                owner = {
                    w.pod_name(ps.name, i): name
                    for name, w in admitted.items()
                    for ps in w.pod_sets
                    for i in range(ps.count)
                }
            users = {owner[pod] for pod in entry.users if pod in owner and owner[pod] != leaving.name}
            if not users:
                continue  # only leaving pods (terminating) use it: charged again when re-admitted
            to = min(users, key=lambda n: (admitted[n].admitted_at or 0.0, n))
            out.append(Move(to, charge))
    return out


def charged(workload: Workload, assignment: Assignment, charge: ClaimCharge) -> tuple[Workload, Assignment]:
    """`workload` paying for `charge` too: the charge joins the pod set using the claim (else its first
    pod set with pods), and the usage is counted again with it."""
    if any(c.claim == charge.claim for ps in workload.pod_sets for c in ps.charges):
        return workload, assignment
    counts = assignment.counts
    target = next(
        (i for i, ps in enumerate(workload.pod_sets) if counts[i] and _uses(ps, charge.claim)),
        next((i for i, n in enumerate(counts) if n), 0),
    )
    sets = tuple(
        dataclasses.replace(ps, charges=(*ps.charges, charge)) if i == target else ps
        for i, ps in enumerate(workload.pod_sets)
    )
    moved = dataclasses.replace(workload, pod_sets=sets)
    # A workload whose pods ask no GPU of their own was admitted on no model: it pays in the model of
    # the claim's devices, as the first payer did.
    model = assignment.model
    if model is None and charge.request.gpu_models:
        model = charge.request.gpu_models[0]
    return moved, Assignment(model, counts, usage_of(moved, model, counts))


def _uses(pod_set: PodSet, claim: str) -> bool:
    return any(c.shared and c.key == claim for c in pod_set.claims)
