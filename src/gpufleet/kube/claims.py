"""A real Pod's ResourceClaims: which claim objects it uses, and its request with what they ask for.

A pod lists its claims in `spec.resourceClaims`, each naming a ResourceClaim (shared, made by someone)
or a ResourceClaimTemplate (then the controller manager's resource-claim controller makes one claim per
pod and records its generated name in `status.resourceClaimStatuses`). The extended-resource path
(`pods.pod_request`) is untouched: a pod's claims are added to the request it makes, by
`scheduler.placement.dra.with_claims`, so the quota and flavor of a GPU do not depend on how it was
asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.api.errors import ValidationError
from gpufleet.fleet.devices import PoolDevice
from gpufleet.fleet.request import PodRequest
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.informer import key_of
from gpufleet.kube.nodes import model_of_product
from gpufleet.kube.pods import pod_request
from gpufleet.kube.transport import Json
from gpufleet.scheduler.placement.dra.allocate import PodClaim
from gpufleet.scheduler.placement.dra.cel import SelectorCache
from gpufleet.scheduler.placement.dra.demand import claim_demand, with_claims


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One entry of a pod's `spec.resourceClaims`."""

    name: str
    """The entry's name, which containers' `resources.claims` refer to."""
    claim: str | None
    """The ResourceClaim's name in the pod's namespace: given, or made from the template; None while
    the template's claim is not made yet."""
    template: str | None
    """The ResourceClaimTemplate it is made from, if any."""


def claim_refs(pod: Json) -> list[ClaimRef]:
    """The pod's claims, in `spec.resourceClaims` order."""
    made = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    refs = []
    for index, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
        name, claim, template = (
            entry.get("name"),
            entry.get("resourceClaimName"),
            entry.get("resourceClaimTemplateName"),
        )
        if not isinstance(name, str) or (claim is None) == (template is None):
            raise ValidationError(
                "each entry needs a name and exactly one of resourceClaimName and resourceClaimTemplateName",
                obj=f"Pod {key_of(pod)}",
                field=f"spec.resourceClaims[{index}]",
            )
        refs.append(ClaimRef(name, claim if claim is not None else made.get(name), template))
    return refs


def product_model(product: str) -> str:
    """A DRA productName (`NVIDIA H100 80GB HBM3`) as the fleet's model name, as the node label's is."""
    return model_of_product(product.replace(" ", "-"))


def pod_request_with_claims(
    pod: Json,
    config: KubeConfig,
    *,
    claims: Sequence[PodClaim],
    classes: Mapping[str, DeviceClassSpec],
    devices: Iterable[PoolDevice],
    cache: SelectorCache | None = None,
) -> PodRequest:
    """What the pod asks of a node: its containers' requests (`pod_request`) with its claims' GPUs."""
    base = pod_request(pod, config)
    if not claims:
        return base
    demand = claim_demand(claims, classes=classes, devices=devices, model_of=product_model, cache=cache)
    return with_claims(base, demand, where=f"Pod {key_of(pod)}")
