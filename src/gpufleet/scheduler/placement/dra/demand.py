"""What a pod's ResourceClaims ask for in the core's units, so queues, quotas and flavors treat a GPU
asked through DRA as one asked as `nvidia.com/gpu`.

Quotas are counted per flavor, the GPU model (or a MIG profile); a claim names no model, it selects
devices. So the claim's flavor is read off the devices it could get: the models (`productName`) of the
devices of the cluster that satisfy the request's class and selectors. Whether a device is a whole GPU
or a MIG partition is its `type` attribute, as NVIDIA's DRA driver for GPUs publishes it (`gpu` or
`mig`, with the MIG `profile`).

Where no device matches anywhere yet (no slices published), the models are unknown and the count still
stands: the pod waits for devices as a pod asking `nvidia.com/gpu` waits for GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.api.dra_claims import ExactDeviceRequest
from gpufleet.api.dra_devices import DeviceClassSpec
from gpufleet.api.errors import ValidationError
from gpufleet.fleet.devices import PoolDevice
from gpufleet.fleet.request import PodRequest
from gpufleet.scheduler.placement.dra.allocate import PodClaim, attribute_value
from gpufleet.scheduler.placement.dra.cel import SelectorCache

GPU_DOMAIN = "gpu.nvidia.com"
TYPE_ATTRIBUTE = f"{GPU_DOMAIN}/type"
PROFILE_ATTRIBUTE = f"{GPU_DOMAIN}/profile"
PRODUCT_ATTRIBUTE = f"{GPU_DOMAIN}/productName"


@dataclass(frozen=True, slots=True)
class ClaimDemand:
    """The GPUs a pod's claims add up to: whole GPUs, or one MIG instance, and the models that fit."""

    gpus: int = 0
    mig: str | None = None
    gpu_models: tuple[str, ...] = ()
    """The models every request can be met with, in order of preference (a `firstAvailable` request's
    preferred alternative's first, else by name); empty = not known yet (any)."""


def claim_demand(
    claims: Sequence[PodClaim],
    *,
    classes: Mapping[str, DeviceClassSpec],
    devices: Iterable[PoolDevice],
    model_of: Callable[[str], str],
    cache: SelectorCache | None = None,
) -> ClaimDemand:
    """The demand of `claims` against the cluster's `devices` (every pool's current generation).

    `model_of` turns a device's productName into the fleet's model name (`NVIDIA H100 80GB HBM3` ->
    `H100-80GB`). A request of `allocationMode: All` counts the most devices one node could give it.
    Raises ValidationError, naming the claim and request, for what the core cannot represent: whole
    GPUs and MIG instances together, more than one MIG instance, or requests no one model meets.
    """
    selectors = cache if cache is not None else SelectorCache()
    pool = list(devices)
    gpus = 0
    migs: list[str] = []
    models: set[str] | None = None
    preference: list[str] = []
    for claim in claims:
        for index, request in enumerate(claim.spec.devices.requests):
            where = f"spec.devices.requests[{index}]"
            asked = [
                _asked(
                    claim,
                    exact,
                    f"{where}.{_field(request.first_available, n)}",
                    classes,
                    pool,
                    selectors,
                    model_of,
                )
                for n, (_, exact) in enumerate(request.alternatives)
            ]
            # The core counts a request before it knows which alternative a node gives: they must
            # count alike (the same whole GPUs, or one MIG instance of one profile).
            if len({(a.gpus, a.migs) for a in asked}) > 1:
                raise ValidationError(
                    "firstAvailable alternatives ask for different numbers or kinds of GPUs; quota "
                    "counts a request the same whichever is allocated",
                    obj=f"ResourceClaim {claim.key}",
                    field=f"{where}.firstAvailable",
                )
            gpus += asked[0].gpus
            migs.extend(asked[0].migs)
            found = {m for a in asked for m in a.models}  # any alternative's models meet the request
            # Flavors are tried in this order (`flavors.candidate_models`): the preferred alternative's
            # models first, so the quota flavor follows the prioritized list.
            preference += [m for a in asked for m in sorted(a.models) if m not in preference]
            if found:
                models = found if models is None else models & found
                if not models:
                    raise ValidationError(
                        "the claims' requests are met by no one GPU model together",
                        obj=f"ResourceClaim {claim.key}",
                        field=f"{where}.exactly.selectors",
                    )
    if migs and gpus:
        raise ValidationError("asks for whole GPUs and MIG instances together", obj=_pod_of(claims))
    if len(migs) > 1:
        raise ValidationError(
            "asks for more than one MIG instance; a pod holds at most one", obj=_pod_of(claims)
        )
    return ClaimDemand(
        gpus=gpus,
        mig=migs[0] if migs else None,
        gpu_models=tuple(m for m in preference if m in (models or ())),
    )


@dataclass(frozen=True, slots=True)
class _Asked:
    gpus: int
    migs: tuple[str, ...]
    models: frozenset[str]


def _field(first_available: object, n: int) -> str:
    return f"firstAvailable[{n}]" if first_available is not None else "exactly"


def _asked(
    claim: PodClaim,
    exact: ExactDeviceRequest,
    where: str,
    classes: Mapping[str, DeviceClassSpec],
    pool: Sequence[PoolDevice],
    selectors: SelectorCache,
    model_of: Callable[[str], str],
) -> _Asked:
    """What one exact request (or firstAvailable alternative) asks for in the core's units."""
    device_class = classes.get(exact.device_class_name)
    if device_class is None:
        raise ValidationError(
            f"DeviceClass {exact.device_class_name} does not exist",
            obj=f"ResourceClaim {claim.key}",
            field=f"{where}.deviceClassName",
        )
    expressions = [s.cel.expression for s in (*device_class.selectors, *exact.selectors)]
    matching = [
        d
        for d in pool
        if all(
            selectors.evaluate(e, (d.driver, d.pool, d.generation, d.device.name), d.device).matched
            for e in expressions
        )
    ]
    count = exact.wanted if exact.allocation_mode == "ExactCount" else _most_on_one_node(matching)
    models = frozenset(
        model_of(str(p)) for d in matching if (p := attribute_value(d, PRODUCT_ATTRIBUTE)) is not None
    )
    kinds = {attribute_value(d, TYPE_ATTRIBUTE) for d in matching}
    if kinds == {"mig"}:
        profiles = sorted({str(attribute_value(d, PROFILE_ATTRIBUTE)) for d in matching})
        if len(profiles) > 1:
            # the quota flavor of a MIG instance is its profile: one request, one flavor
            raise ValidationError(
                f"matches MIG instances of several profiles ({', '.join(profiles)}); select one",
                obj=f"ResourceClaim {claim.key}",
                field=f"{where}.selectors",
            )
        return _Asked(0, tuple(profiles * count), models)
    return _Asked(count, (), models)


def _most_on_one_node(matching: Sequence[PoolDevice]) -> int:
    # Pools are per node for node-local drivers: the largest pool bounds what one node can give.
    per_pool: dict[tuple[str, str], int] = {}
    for d in matching:
        per_pool[(d.driver, d.pool)] = per_pool.get((d.driver, d.pool), 0) + 1
    return max(per_pool.values(), default=1)


def _pod_of(claims: Sequence[PodClaim]) -> str:
    return "ResourceClaims " + ", ".join(c.key for c in claims)


def with_claims(request: PodRequest, demand: ClaimDemand, *, where: str) -> PodRequest:
    """The pod's request from its containers, with the GPUs its claims ask for.

    A pod asks for GPUs one way: through `nvidia.com/gpu` (and its siblings) or through claims; both at
    once would count its GPUs twice, and is refused naming the pod.
    """
    if not (demand.gpus or demand.mig):
        return request
    if request.gpus or request.gpu_milli or request.mig is not None:
        raise ValidationError(
            "asks for GPUs both as extended resources and through resourceClaims; use one",
            obj=where,
            field="spec.resourceClaims",
        )
    models = request.gpu_models
    if demand.gpu_models:
        models = tuple(m for m in demand.gpu_models if not models or m in models)
        if not models:
            raise ValidationError(
                "its node selector's GPU model is not one its claims' devices have", obj=where, field="spec"
            )
    return replace(request, gpus=demand.gpus, mig=demand.mig, gpu_models=models)
