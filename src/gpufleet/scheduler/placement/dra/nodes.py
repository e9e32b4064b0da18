"""DRA as a filter over many nodes: which nodes can give a pod's claims their devices, and for the
others how many nodes each check turned away, in the style of `NoFit`'s per-filter counts.

Each node is counted once, against the check of the unmet request that turned away most of its devices,
preferring the checks of availability (in use, shared counters, constraints) over the selectors when
both turned some away (or, where no device was turned away, against the reason's message: a missing
class, an incomplete pool, a search that gave up), so the counts add up to the nodes rejected.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.fleet.devices import DeviceId, NodeDevices
from gpufleet.scheduler.placement.dra.allocate import PodClaim, allocate_claims
from gpufleet.scheduler.placement.dra.cel import SelectorCache
from gpufleet.scheduler.placement.dra.result import ClaimAllocation, DraUnsatisfied

FILTER_NAME = "DynamicResources"
"""The filter's name in pending reasons, as kube-scheduler's plugin is called."""


@dataclass(slots=True)
class DraFilterResult:
    fits: dict[str, list[ClaimAllocation]] = field(default_factory=dict)
    """Node -> the allocation its devices give the pod's claims, for every node that can."""
    rejected: dict[str, int] = field(default_factory=dict)
    """`claim C request R: check` -> nodes it rejected."""
    example: dict[str, DraUnsatisfied] = field(default_factory=dict)
    """For each key of `rejected`, the first node's full reason (for `describe`)."""

    def message(self) -> str:
        """`0/N nodes have the devices: 3 claim team-a/c request gpus: request selector 0, ...`."""
        total = len(self.fits) + sum(self.rejected.values())
        parts = ", ".join(
            f"{n} {key}" for key, n in sorted(self.rejected.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        return f"{len(self.fits)}/{total} nodes have the devices" + (f": {parts}" if parts else "")


def filter_nodes(
    claims: Sequence[PodClaim],
    nodes: Mapping[str, NodeDevices],
    *,
    classes: Mapping[str, DeviceClassSpec],
    in_use: Collection[DeviceId] = (),
    admin_namespaces: Collection[str] = (),
    cache: SelectorCache | None = None,
) -> DraFilterResult:
    """Tries the claims on every node (in the mapping's order) and says where they fit and why not."""
    selectors = cache if cache is not None else SelectorCache()
    result = DraFilterResult()
    counts: Tally[str] = Tally()
    for name, devices in nodes.items():
        answer = allocate_claims(
            claims,
            node_name=name,
            node=devices,
            classes=classes,
            in_use=in_use,
            admin_namespaces=admin_namespaces,
            cache=selectors,
        )
        if not isinstance(answer, DraUnsatisfied):
            result.fits[name] = answer
            continue
        key = f"claim {answer.claim} request {answer.request}: {_dominant(answer)}"
        counts[key] += 1
        result.example.setdefault(key, answer)
    result.rejected = dict(counts)
    return result


def _dominant(reason: DraUnsatisfied) -> str:
    checks = [(n, check) for check, n in reason.rejected.items() if n]
    # Selectors turn away the devices of other kinds (on a MIG GPU, every other profile), usually the
    # most; where devices of the right kind were there and something else turned them away (in use,
    # shared counters, a constraint), that is why the node does not fit.
    availability = [(n, check) for n, check in checks if not _is_selector(check)]
    checks = availability or checks
    if not checks:
        return reason.message or "no devices"
    return max(checks, key=lambda nc: (nc[0], nc[1]))[1]


def _is_selector(check: str) -> bool:
    return check.startswith(("class selector", "request selector"))
