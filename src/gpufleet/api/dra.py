"""The Dynamic Resource Allocation kinds of `resource.k8s.io/v1`: DeviceClass, ResourceSlice,
ResourceClaim and ResourceClaimTemplate.

These are Kubernetes' own kinds, not gpufleet's: the same YAML reads in both worlds, and the kube world
can hand the API server's objects to these models. Their specs are in `gpufleet.api.dra_devices` and
`gpufleet.api.dra_claims`, which the scheduling core reads; docs/dra.md says what uses them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gpufleet.api.dra_claims import (
    AllocationResult,
    ResourceClaimConsumerReference,
    ResourceClaimSpec,
    ResourceClaimTemplateSpec,
)
from gpufleet.api.dra_devices import DeviceClassSpec, ResourceSliceSpec
from gpufleet.api.resource import Resource, kind_field
from gpufleet.api.status import ObjectStatus

DRA_API_VERSION = "resource.k8s.io/v1"


def dra_api_version_field() -> Any:
    return Field(DRA_API_VERSION, description=f"The API group and version: {DRA_API_VERSION}.")


class DeviceClass(Resource):
    """A kind of device users ask for by name (`gpu.nvidia.com`): selectors every such device meets."""

    NAMESPACED = False
    api_version: Literal["resource.k8s.io/v1"] = dra_api_version_field()
    kind: Literal["DeviceClass"] = kind_field("DeviceClass")
    spec: DeviceClassSpec = Field(description="The selectors and configuration of the class.")


class ResourceSlice(Resource):
    """Part (or all) of one driver's pool of devices, as the driver publishes it."""

    NAMESPACED = False
    api_version: Literal["resource.k8s.io/v1"] = dra_api_version_field()
    kind: Literal["ResourceSlice"] = kind_field("ResourceSlice")
    spec: ResourceSliceSpec = Field(description="The driver, pool, node scope and devices.")


class ResourceClaimStatus(ObjectStatus):
    allocation: AllocationResult | None = Field(
        default=None, description="Set once allocated; never changed while the claim is reserved."
    )
    reserved_for: list[ResourceClaimConsumerReference] = Field(
        default_factory=list, description="The pods using the claim (at most 256)."
    )


class ResourceClaim(Resource):
    """A request for devices, by one pod or shared by several."""

    api_version: Literal["resource.k8s.io/v1"] = dra_api_version_field()
    kind: Literal["ResourceClaim"] = kind_field("ResourceClaim")
    spec: ResourceClaimSpec = Field(description="The devices asked for.")
    status: ResourceClaimStatus = Field(
        default_factory=ResourceClaimStatus, description="The allocation and the pods that use it."
    )


class ResourceClaimTemplate(Resource):
    """The claim a pod's `resourceClaims` entry makes for each pod (one claim per pod)."""

    api_version: Literal["resource.k8s.io/v1"] = dra_api_version_field()
    kind: Literal["ResourceClaimTemplate"] = kind_field("ResourceClaimTemplate")
    spec: ResourceClaimTemplateSpec = Field(description="The claim to make.")
