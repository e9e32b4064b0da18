"""Dynamic Resource Allocation's published side, in `resource.k8s.io/v1`'s shape: what a DeviceClass
selects and what a ResourceSlice publishes (the kinds themselves are in `gpufleet.api.dra`).

Field names and nesting follow the v1 API (GA since Kubernetes 1.34) so the same YAML reads in both
worlds and the kube world can hand the API server's objects to the same models. Only the fields
allocation reads are modelled; device taints, binding conditions and consumable capacity (alpha and
beta features of 1.34) are refused by `extra="forbid"` rather than silently ignored, so a slice that
relies on them is not misread. These models import no kind (no `Resource`), so that the scheduling
core may read them without the kinds' clock-reading metadata.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import Quantity


class CELDeviceSelector(ApiModel):
    expression: str = Field(
        min_length=1,
        description="A CEL expression over `device` (driver, attributes, capacity, allowMultipleAllocations) "
        "that must be true for the device to be selected.",
    )


class DeviceSelector(ApiModel):
    cel: CELDeviceSelector = Field(description="The CEL expression a device must satisfy.")


class OpaqueDeviceConfiguration(ApiModel):
    driver: str = Field(min_length=1, description="The driver the parameters are for.")
    parameters: dict[str, Any] = Field(description="Driver-specific parameters, passed on unread.")


class DeviceClassConfiguration(ApiModel):
    opaque: OpaqueDeviceConfiguration | None = Field(default=None, description="Driver configuration.")


class DeviceClassSpec(ApiModel):
    selectors: list[DeviceSelector] = Field(
        default_factory=list, description="Every device of the class satisfies all of these."
    )
    config: list[DeviceClassConfiguration] = Field(
        default_factory=list, description="Configuration handed to the driver for devices of the class."
    )
    extended_resource_name: str | None = Field(
        default=None, description="An extended resource name this class also answers to (1.34 alpha)."
    )


class NodeSelectorRequirement(ApiModel):
    key: str = Field(min_length=1, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="How the label's value is compared with values."
    )
    values: list[str] = Field(default_factory=list, description="The values compared with.")

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        # The API server's own rules (ValidateNodeSelectorRequirement): a requirement it would refuse
        # matches no node here either, so it is refused rather than leaving a pod pending for ever.
        if self.operator in ("In", "NotIn") and not self.values:
            raise field_error("values", f"must not be empty with operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise field_error("values", f"must be empty with operator {self.operator}")
        if self.operator in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise field_error("values", f"must hold exactly one value with operator {self.operator}")
            try:
                int(self.values[0])
            except ValueError:
                raise field_error(
                    "values[0]", f"must be an integer with operator {self.operator}, got {self.values[0]!r}"
                ) from None
        return self


NODE_NAME_FIELD = "metadata.name"
"""The one node field a NodeSelector's matchFields may name (as in Kubernetes)."""


class NodeSelectorTerm(ApiModel):
    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, description="Label requirements, all of which must hold."
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default_factory=list, description="Field requirements (metadata.name), all of which must hold."
    )

    @model_validator(mode="after")
    def _fields_name_the_node(self) -> NodeSelectorTerm:
        # ValidateNodeFieldSelectorRequirement: metadata.name only, In or NotIn, exactly one value.
        for index, req in enumerate(self.match_fields):
            if req.key != NODE_NAME_FIELD:
                raise field_error(f"matchFields[{index}].key", f"must be {NODE_NAME_FIELD}, got {req.key!r}")
            if req.operator not in ("In", "NotIn") or len(req.values) != 1:
                raise field_error(
                    f"matchFields[{index}]",
                    "must be operator In or NotIn with exactly one value (a node name)",
                )
        return self


class NodeSelector(ApiModel):
    """Kubernetes' core/v1 NodeSelector: a node matches if any term matches."""

    node_selector_terms: list[NodeSelectorTerm] = Field(description="The terms, ORed.")


class DeviceAttribute(ApiModel):
    """One typed attribute value; exactly one of the four is set, as Kubernetes requires."""

    int_: int | None = Field(default=None, alias="int", description="An integer value.")
    bool_: bool | None = Field(default=None, alias="bool", description="A boolean value.")
    string: str | None = Field(default=None, max_length=64, description="A string value.")
    version: str | None = Field(default=None, max_length=64, description="A semantic version (semver 2.0).")

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        if sum(v is not None for v in (self.int_, self.bool_, self.string, self.version)) != 1:
            raise field_error("", "exactly one of int, bool, string and version must be set")
        return self

    @property
    def value(self) -> int | bool | str:
        """The value, whichever type it has (a version as its text)."""
        for v in (self.int_, self.bool_, self.string, self.version):
            if v is not None:
                return v
        raise AssertionError("validated: one value is set")  # pragma: no cover


class DeviceCapacity(ApiModel):
    value: Quantity = Field(description="The device's capacity of this resource (`80Gi`, `132`).")


class Counter(ApiModel):
    value: Quantity = Field(description="The amount of the counter.")


class CounterSet(ApiModel):
    """Counters a pool's partitionable devices consume together (a GPU's memory slices and SMs)."""

    name: str = Field(min_length=1, description="The set's name, unique in the pool.")
    counters: dict[str, Counter] = Field(min_length=1, description="The amounts available, by name.")


class DeviceCounterConsumption(ApiModel):
    counter_set: str = Field(min_length=1, description="The pool's CounterSet the device consumes from.")
    counters: dict[str, Counter] = Field(min_length=1, description="What the device consumes, by name.")


class Device(ApiModel):
    """One allocatable device of a pool (a whole GPU, or one MIG partition of it)."""

    name: str = Field(min_length=1, description="Unique within the pool (a DNS label).")
    attributes: dict[str, DeviceAttribute] = Field(
        default_factory=dict,
        description="Qualified names (`gpu.nvidia.com/productName`, or unqualified for the driver's "
        "domain) to typed values; selectors and matchAttribute read them.",
    )
    capacity: dict[str, DeviceCapacity] = Field(
        default_factory=dict, description="Qualified names to quantities (`memory: 80Gi`)."
    )
    consumes_counters: list[DeviceCounterConsumption] = Field(
        default_factory=list,
        description="Shared counters the device uses while allocated; two devices whose sums exceed a "
        "CounterSet (two MIG layouts of one GPU) cannot both be allocated.",
    )
    node_name: str | None = Field(default=None, description="Per-device node, with perDeviceNodeSelection.")
    node_selector: NodeSelector | None = Field(default=None, description="Per-device node selector.")
    all_nodes: bool | None = Field(default=None, description="Per-device: reachable from every node.")
    allow_multiple_allocations: bool | None = Field(
        default=None, description="Whether several claims may hold it at once (1.34 alpha)."
    )

    @model_serializer(mode="wrap")
    def _leave_out_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_lists(handler(self))


class ResourcePool(ApiModel):
    name: str = Field(min_length=1, description="The pool's name; with the driver, it names the pool.")
    generation: int = Field(
        ge=0, description="Bumped by the driver whenever the pool changes: only the highest counts."
    )
    resource_slice_count: int = Field(
        ge=1, description="How many slices the pool has at this generation (to know when it is complete)."
    )


class ResourceSliceSpec(ApiModel):
    driver: str = Field(min_length=1, description="The DRA driver publishing the devices (`gpu.nvidia.com`).")
    pool: ResourcePool = Field(description="The pool the slice is part of.")
    node_name: str | None = Field(default=None, description="The node the devices are local to.")
    node_selector: NodeSelector | None = Field(default=None, description="Nodes that reach the devices.")
    all_nodes: bool | None = Field(default=None, description="Every node reaches the devices.")
    per_device_node_selection: bool | None = Field(
        default=None, description="Each device says which nodes reach it."
    )
    devices: list[Device] = Field(default_factory=list, description="The devices, at most 128.")
    shared_counters: list[CounterSet] = Field(
        default_factory=list, description="Counter sets that the pool's devices consume from."
    )

    @model_serializer(mode="wrap")
    def _leave_out_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_lists(handler(self))

    @model_validator(mode="after")
    def _one_node_scope(self) -> ResourceSliceSpec:
        scopes = [
            self.node_name is not None,
            self.node_selector is not None,
            bool(self.all_nodes),
            bool(self.per_device_node_selection),
        ]
        if sum(scopes) != 1:
            raise field_error(
                "nodeName", "exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection"
            )
        names = [d.name for d in self.devices]
        if len(names) != len(set(names)):
            dup = next(n for n in names if names.count(n) > 1)
            raise field_error("devices", f"device {dup!r} is listed twice")
        return self


def _without_empty_lists(data: dict[str, Any]) -> dict[str, Any]:
    # An empty list means the same as an absent one, but the v1 API server (1.36) counts an empty
    # `sharedCounters` as set and refuses it beside `devices` (only one of the two may be set).
    return {key: value for key, value in data.items() if value != []}
