"""What one pod asks for: whole GPUs, a share of one GPU, or one MIG instance, plus CPU and memory."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from gpufleet.api.base import ApiModel, field_error, yaml_name
from gpufleet.api.fields import MigProfileName, Quantity
from gpufleet.api.quantity import cpu_milli, memory_mib
from gpufleet.api.versions import CudaTuple, CudaVersion, parse_cuda_version

MILLI_PER_GPU = 1000


class Toleration(ApiModel):
    """Kubernetes toleration semantics: with `operator: Exists` and no key it tolerates every taint."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""

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

    gpus: int | None = Field(default=None, ge=0)
    gpu_milli: int | None = Field(default=None, ge=1, le=MILLI_PER_GPU - 1)
    mig: MigProfileName | None = None
    gpu_model: str | list[str] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="One GPU model or a list of acceptable models.",
    )
    cpu: Quantity | None = None
    memory: Quantity | None = None
    template: dict[str, Any] | None = Field(
        default=None, description="Kubernetes world: a PodTemplateSpec for the pod."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, description="Taints the pod tolerates (GPU taints, a pool's own taints)."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels the pod's node must carry."
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
