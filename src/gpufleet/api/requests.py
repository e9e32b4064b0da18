"""What one pod asks for: whole GPUs, a share of one GPU, or one MIG instance, plus CPU and memory."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from gpufleet.api.base import ApiModel, field_error, yaml_name
from gpufleet.api.dra_claims import PodResourceClaim, template_resource_claims
from gpufleet.api.dra_devices import NodeSelector
from gpufleet.api.errors import ValidationError
from gpufleet.api.fields import MAX_GPUS_PER_NODE, Count, MigProfileName, Quantity, checked_on_write
from gpufleet.api.gpu_models import canonical_name, is_known_model, unknown_model_message
from gpufleet.api.numerals import plain_digits
from gpufleet.api.podtemplate import check_template_shape
from gpufleet.api.quantity import cpu_milli, memory_mib
from gpufleet.api.versions import CudaTuple, CudaVersion, parse_cuda_version

MILLI_PER_GPU = 1000

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""The device plugins' resource names a pod asks for GPUs with in Kubernetes."""


class Toleration(ApiModel):
    """Kubernetes toleration semantics: with `operator: Exists` and no key it tolerates every taint."""

    key: str = Field(default="", description="The taint's key; empty with Exists: every taint.")
    operator: Literal["Equal", "Exists"] = Field(
        default="Equal", description="Equal: the taint's value must be `value`; Exists: any value."
    )
    value: str = Field(default="", description="The taint's value, with Equal.")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="", description="The taint effect tolerated; empty: every effect."
    )

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise field_error("value", "must be empty with operator Exists")
        return self


class PodRequest(ApiModel):
    """The per-pod request of a TrainingJob worker or an InferenceService replica.

    At most one of gpus, gpuMilli and mig is set; none of them means a CPU-only pod.
    gpuModel is one model or a list of acceptable models.
    """

    gpus: Count | None = Field(default=None, ge=0, le=MAX_GPUS_PER_NODE, description="Whole GPUs per pod.")
    gpu_milli: Count | None = Field(
        default=None,
        ge=1,
        le=MILLI_PER_GPU - 1,
        description="A share of one GPU, in thousandths (500: half), on a time-slicing or MPS pool.",
    )
    mig: MigProfileName | None = Field(
        default=None, description="One MIG instance of this profile, e.g. 3g.40gb."
    )
    gpu_model: str | list[str] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="One GPU model or a list of acceptable models.",
    )
    cpu: Quantity | None = Field(default=None, description="CPU per pod, a Kubernetes quantity (32, 500m).")
    memory: Quantity | None = Field(
        default=None, description="Memory per pod, a Kubernetes quantity (256Gi)."
    )
    template: dict[str, Any] | None = Field(
        default=None, description="Kubernetes world: a PodTemplateSpec for the pod."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, description="Taints the pod tolerates (GPU taints, a pool's own taints)."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels the pod's node must carry."
    )
    node_affinity: NodeSelector | None = Field(
        default=None,
        description="Required node affinity, as Kubernetes' NodeSelector: the pod's node must satisfy one "
        "of nodeSelectorTerms (matchExpressions on labels, matchFields on metadata.name), and nodeSelector "
        "too.",
    )
    cuda_version: CudaVersion | None = Field(
        default=None,
        description="The CUDA toolkit the pod's image was built with (e.g. 12.4): the pod goes only to "
        "nodes whose NVIDIA driver runs it.",
    )

    @model_validator(mode="after")
    def _one_kind_of_gpu(self) -> PodRequest:
        given = [name for name in ("gpus", "gpu_milli", "mig") if getattr(self, name) is not None]
        if len(given) > 1:
            names = " and ".join(yaml_name(name) for name in given)
            raise field_error(yaml_name(given[1]), f"set only one of gpus, gpuMilli and mig (got {names})")
        return self

    @model_validator(mode="after")
    def _known_gpu_models(self, info: ValidationInfo) -> PodRequest:
        # As a pool's gpuModel: a model no pool can have would leave the pod pending for ever.
        if checked_on_write(info) and self.gpu_model is not None:
            single = isinstance(self.gpu_model, str)
            for index, model in enumerate(self.gpu_models):
                if model and not is_known_model(model):
                    where = "gpuModel" if single else f"gpuModel[{index}]"
                    raise field_error(where, unknown_model_message(model))
            # Nodes carry canonical names and placement compares names exactly: `H100` must match
            # an `H100-80GB` pool, so the alias is stored as the name it stands for.
            canonical = [canonical_name(model) if model else model for model in self.gpu_models]
            self.gpu_model = canonical[0] if single else canonical
        return self

    @model_validator(mode="after")
    def _template_claims_are_entries(self) -> PodRequest:
        # DRA: the pod template's resourceClaims are what the controllers make claims from; a malformed
        # entry is refused when the object is written, not when its pods are placed. The parts the
        # Kubernetes operator reads or writes into must have their Kubernetes shape (`api.podtemplate`).
        try:
            check_template_shape(self.template)
            template_resource_claims(self.template)
        except ValidationError as exc:
            raise field_error(exc.field or "template", exc.detail) from None
        return self

    @property
    def resource_claims(self) -> list[PodResourceClaim]:
        """DRA: the pod template's `spec.resourceClaims` entries."""
        return template_resource_claims(self.template)

    def device_resources(self) -> dict[str, int]:
        """What the pod asks of the device plugins, by resource name: `nvidia.com/gpu` for whole GPUs,
        `nvidia.com/gpu.shared` for a share, `nvidia.com/mig-<profile>` for a MIG instance."""
        if self.gpus:
            return {GPU_RESOURCE: self.gpus}
        if self.gpu_milli:
            return {SHARED_GPU_RESOURCE: 1}
        if self.mig is not None:
            return {MIG_RESOURCE_PREFIX + self.mig: 1}
        return {}

    @property
    def gpu_models(self) -> tuple[str, ...]:
        """The acceptable GPU models; empty means any."""
        if self.gpu_model is None:
            return ()
        return (self.gpu_model,) if isinstance(self.gpu_model, str) else tuple(self.gpu_model)

    @property
    def cuda(self) -> CudaTuple | None:
        """The stated CUDA version as (major, minor); None when the pod states none."""
        return None if self.cuda_version is None else parse_cuda_version(self.cuda_version)

    @property
    def total_gpu_milli(self) -> int:
        """GPU compute per pod in milli-GPU for whole and shared GPUs (0 for MIG or CPU-only pods)."""
        if self.gpus is not None:
            return self.gpus * MILLI_PER_GPU
        return self.gpu_milli or 0

    @property
    def cpu_milli(self) -> int:
        """CPU request in milli-cores (0 when unset)."""
        return 0 if self.cpu is None else cpu_milli(self.cpu)

    @property
    def memory_mib(self) -> int:
        """Memory request in MiB (0 when unset)."""
        return 0 if self.memory is None else memory_mib(self.memory)


def is_gpu_resource(name: str) -> bool:
    """Whether a container resource name asks for a GPU, a share of one or a MIG instance."""
    return name in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX)


def check_template_gpus(request: PodRequest, field: str) -> None:
    """Refuses GPUs asked for in `request.template` that are not what the request itself asks for.

    gpufleet gives each pod what the request says (`gpus`, `gpuMilli` or `mig`): that is what is
    queued, charged to quotas and placed, and what the Kubernetes world writes into the pod's first
    container. A GPU resource in the template is accepted only where it says the same, on that first
    container; anywhere else it would be ignored, or would ask for GPUs no one scheduled. `field` is
    the request's name in its spec (`worker`, `replica`); the error names the template's field and the
    request's field to use instead.
    """
    spec = request.template.get("spec") if isinstance(request.template, Mapping) else None
    if not isinstance(spec, Mapping):
        return
    wanted = request.device_resources()
    for where, name, value in _template_gpu_resources(spec):
        first = where.startswith("containers[0].")
        given = _count(value)
        if first and name in wanted and given == wanted[name]:
            continue  # says what the request says
        if given == 0 and name not in wanted:
            continue  # asks for none
        path = f"{field}.template.spec.{where}.{name}"
        # field_error splits the path at dots; a resource name's own dots join back unchanged.
        raise field_error(path, _advice(request, field, name, value, first=first))


def _template_gpu_resources(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(`containers[i].resources.limits`, resource name, amount) of every GPU resource of a pod spec."""
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for section in ("limits", "requests"):
                amounts = resources.get(section)
                if not isinstance(amounts, Mapping):
                    continue
                for name, value in amounts.items():
                    if isinstance(name, str) and is_gpu_resource(name):
                        yield f"{group}[{index}].resources.{section}", name, value


def _count(value: Any) -> int | None:
    """A device count as Kubernetes writes it (`8` or `"8"`); None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and plain_digits(value.strip()):
        return int(value.strip())
    return None


def _advice(request: PodRequest, field: str, name: str, value: Any, *, first: bool) -> str:
    own = f"spec.{field}"
    asked = request.device_resources()
    if not first:
        return (
            f"asks for {name}: {value}, which gpufleet does not schedule: a pod's GPUs go to its first "
            f"container, from {own}.gpus, gpuMilli or mig; remove it here"
        )
    if asked:
        said = ", ".join(f"{key}: {amount}" for key, amount in asked.items())
        return (
            f"asks for {name}: {value} but {own} asks for {said}; the pod gets what {own} says: "
            f"remove {name} from the template or make the two agree"
        )
    if name == GPU_RESOURCE:
        use = f"{own}.gpus: {value}"
    elif name == SHARED_GPU_RESOURCE:
        use = f"{own}.gpuMilli (the share of one GPU in thousandths, e.g. 500)"
    else:
        use = f"{own}.mig: {name.removeprefix(MIG_RESOURCE_PREFIX)}"
    return f"GPUs are not read from the pod template; ask for them with {use} and leave {name} out of it"
