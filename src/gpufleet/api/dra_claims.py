"""Dynamic Resource Allocation's asking side, in `resource.k8s.io/v1`'s shape: what a ResourceClaim
(or the template it is made from) asks for, and what its allocation says (the kinds are in
`gpufleet.api.dra`).

Per-request tolerations are not modelled yet: they are refused rather than ignored, so a claim is never
allocated something it did not ask for. `firstAvailable` (prioritized alternatives) is. Like
`gpufleet.api.dra_devices`, this module imports no kind, so the scheduling core may read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import AwareDatetime, Field, model_validator
from pydantic import ValidationError as PydanticValidationError

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.dra_devices import DeviceSelector, NodeSelector, OpaqueDeviceConfiguration
from gpufleet.api.errors import ValidationError

AllocationMode = Literal["ExactCount", "All"]


class ExactDeviceRequest(ApiModel):
    device_class_name: str = Field(min_length=1, description="The DeviceClass every device must belong to.")
    selectors: list[DeviceSelector] = Field(
        default_factory=list, description="Further CEL selectors, all of which a device must satisfy."
    )
    allocation_mode: AllocationMode = Field(
        default="ExactCount",
        description="ExactCount: `count` devices; All: every matching device of the node's pools "
        "(and at least one).",
    )
    count: int | None = Field(default=None, ge=1, description="With ExactCount: how many (default 1).")
    admin_access: bool | None = Field(
        default=None,
        description="Access to devices already in use, for monitoring; never given unless asked.",
    )

    @model_validator(mode="after")
    def _count_fits_mode(self) -> ExactDeviceRequest:
        if self.allocation_mode == "All" and self.count is not None:
            raise field_error("count", "must not be set with allocationMode All")
        return self

    @property
    def wanted(self) -> int:
        """How many devices ExactCount asks for."""
        return self.count if self.count is not None else 1


class DeviceSubRequest(ExactDeviceRequest):
    """One alternative of a `firstAvailable` request: an exact request with a name of its own, and no
    admin access (Kubernetes does not offer it there)."""

    name: str = Field(min_length=1, description="The alternative's name, unique in its request.")

    @model_validator(mode="after")
    def _no_admin_access(self) -> DeviceSubRequest:
        if self.admin_access is not None:
            raise field_error("adminAccess", "is not allowed in a firstAvailable alternative")
        return self


MAX_SUBREQUESTS = 8
"""Alternatives one `firstAvailable` request may list (Kubernetes' limit)."""


class DeviceRequest(ApiModel):
    name: str = Field(min_length=1, description="The request's name, unique in the claim (a DNS label).")
    exactly: ExactDeviceRequest | None = Field(default=None, description="The one kind of device asked for.")
    first_available: list[DeviceSubRequest] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SUBREQUESTS,
        description="Alternatives in order of preference: the first that can be allocated is (its "
        "devices' results name the request `<request>/<alternative>`).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceRequest:
        if (self.exactly is None) == (self.first_available is None):
            raise field_error("exactly", "exactly one of exactly and firstAvailable")
        names = [s.name for s in self.first_available or ()]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise field_error(f"firstAvailable[{i}].name", f"alternative {name!r} is listed twice")
        return self

    @property
    def alternatives(self) -> list[tuple[str, ExactDeviceRequest]]:
        """What may be allocated for this request, in order of preference, each under the name its
        results carry: the request itself (`exactly`), or each `firstAvailable` alternative as
        `<request>/<alternative>`."""
        if self.first_available is None:
            assert self.exactly is not None
            return [(self.name, self.exactly)]
        return [(f"{self.name}/{sub.name}", sub) for sub in self.first_available]


class DeviceConstraint(ApiModel):
    requests: list[str] = Field(
        default_factory=list, description="The requests it applies to; empty = all of the claim's."
    )
    match_attribute: str | None = Field(
        default=None,
        description="A qualified attribute name every allocated device must have, with one value "
        "(`gpu.nvidia.com/cliqueId`: all GPUs in one NVLink clique).",
    )
    distinct_attribute: str | None = Field(
        default=None,
        description="A qualified attribute name every allocated device must have, each with a "
        "value of its own (1.34 alpha).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceConstraint:
        if (self.match_attribute is None) == (self.distinct_attribute is None):
            raise field_error("matchAttribute", "exactly one of matchAttribute and distinctAttribute")
        return self


class DeviceClaimConfiguration(ApiModel):
    requests: list[str] = Field(default_factory=list, description="The requests it applies to.")
    opaque: OpaqueDeviceConfiguration | None = Field(default=None, description="Driver configuration.")


class DeviceClaim(ApiModel):
    requests: list[DeviceRequest] = Field(default_factory=list, description="What devices are wanted.")
    constraints: list[DeviceConstraint] = Field(
        default_factory=list, description="Rules across the allocated devices."
    )
    config: list[DeviceClaimConfiguration] = Field(
        default_factory=list, description="Configuration handed to the drivers."
    )

    @model_validator(mode="after")
    def _names(self) -> DeviceClaim:
        names = [r.name for r in self.requests]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise field_error(f"requests[{i}].name", f"request {name!r} is listed twice")
        # A constraint may name a request, or one alternative of a firstAvailable one.
        known = set(names) | {alt for r in self.requests for alt, _ in r.alternatives}
        for i, constraint in enumerate(self.constraints):
            for name in constraint.requests:
                if name not in known:
                    raise field_error(f"constraints[{i}].requests", f"no request is named {name!r}")
        return self


class ResourceClaimSpec(ApiModel):
    devices: DeviceClaim = Field(default_factory=DeviceClaim, description="The devices asked for.")


class DeviceRequestAllocationResult(ApiModel):
    request: str = Field(min_length=1, description="The request the device was allocated for.")
    driver: str = Field(min_length=1, description="The device's driver.")
    pool: str = Field(min_length=1, description="The device's pool.")
    device: str = Field(min_length=1, description="The device's name in the pool.")
    admin_access: bool | None = Field(default=None, description="Whether it was given for admin access.")


class DeviceAllocationConfiguration(ApiModel):
    source: Literal["FromClass", "FromClaim"] = Field(description="Where the configuration came from.")
    requests: list[str] = Field(default_factory=list, description="The requests it applies to.")
    opaque: OpaqueDeviceConfiguration | None = Field(default=None, description="Driver configuration.")


class DeviceAllocationResult(ApiModel):
    results: list[DeviceRequestAllocationResult] = Field(
        default_factory=list, description="One entry per allocated device."
    )
    config: list[DeviceAllocationConfiguration] = Field(
        default_factory=list, description="Configuration of the class and the claim, for the drivers."
    )


class AllocationResult(ApiModel):
    devices: DeviceAllocationResult = Field(
        default_factory=DeviceAllocationResult, description="The allocated devices."
    )
    node_selector: NodeSelector | None = Field(
        default=None, description="Nodes the devices are reachable from: the claim's pods must run there."
    )
    allocation_timestamp: AwareDatetime | None = Field(default=None, description="When it was allocated.")


class ResourceClaimConsumerReference(ApiModel):
    api_group: str | None = Field(default=None, description="The consumer's API group (empty for pods).")
    resource: str = Field(min_length=1, description="The consumer's resource, e.g. `pods`.")
    name: str = Field(min_length=1, description="The consumer's name.")
    uid: str = Field(min_length=1, description="The consumer's uid.")


class ClaimTemplateMeta(ApiModel):
    """What of a claim's metadata a template may set (its name is made from the pod's)."""

    labels: dict[str, str] = Field(default_factory=dict, description="Labels every claim gets.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations every claim gets.")


class ResourceClaimTemplateSpec(ApiModel):
    metadata: ClaimTemplateMeta | None = Field(
        default=None, description="Labels and annotations for the claims."
    )
    spec: ResourceClaimSpec = Field(description="The spec every claim made from the template gets.")


class PodResourceClaim(ApiModel):
    """One entry of a pod's `spec.resourceClaims`: a claim by name (shared) or a template (one claim per
    pod), under a name the pod's containers refer to."""

    name: str = Field(min_length=1, description="The entry's name, unique in the pod (a DNS label).")
    resource_claim_name: str | None = Field(
        default=None, description="A ResourceClaim in the pod's namespace, shared by the pods naming it."
    )
    resource_claim_template_name: str | None = Field(
        default=None, description="A ResourceClaimTemplate: each pod gets a claim made from it."
    )

    @model_validator(mode="after")
    def _one_source(self) -> PodResourceClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise field_error(
                "resourceClaimName", "exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        return self


class PodResourceClaimStatus(ApiModel):
    """Which ResourceClaim a pod's `resourceClaims` entry resolved to (Kubernetes'
    `status.resourceClaimStatuses`)."""

    name: str = Field(min_length=1, description="The pod's `resourceClaims` entry.")
    resource_claim_name: str = Field(min_length=1, description="The ResourceClaim it uses.")


def template_resource_claims(template: Mapping[str, Any] | None) -> list[PodResourceClaim]:
    """The `spec.resourceClaims` of a PodTemplateSpec (empty when it has none).

    Raises ValidationError naming `template.spec.resourceClaims[i]` for an entry that is not one."""
    if template is None:
        return []  # most pods (asked on every look at one): no Mapping check, which is slow
    spec = template.get("spec") if isinstance(template, Mapping) else None
    raw = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValidationError("must be a list", field="template.spec.resourceClaims")
    entries: list[PodResourceClaim] = []
    for index, item in enumerate(raw):
        where = f"template.spec.resourceClaims[{index}]"
        try:
            entry = PodResourceClaim.model_validate(item)
        except PydanticValidationError as exc:
            first = exc.errors()[0]
            raise ValidationError(str(first["msg"]), field=where) from None
        if entry.name in {e.name for e in entries}:
            raise ValidationError(f"entry {entry.name!r} is listed twice", field=f"{where}.name")
        entries.append(entry)
    return entries
