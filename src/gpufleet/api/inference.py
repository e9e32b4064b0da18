"""InferenceService: an autoscaled set of model-serving replicas, spread over nodes by default."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field, ValidationInfo, field_validator, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import MAX_REPLICAS, Count, PriorityClassName, checked_on_write
from gpufleet.api.labels import REVISION_LABEL, SERVICE_LABEL, WORKLOAD_LABEL, service_workload_name
from gpufleet.api.meta import check_label_value, check_name, check_name_in_labels
from gpufleet.api.requests import PodRequest, check_template_gpus
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import ObjectStatus
from gpufleet.api.training import DEFAULT_QUEUE

ServicePhase = Literal["Pending", "Running", "Failed", "Suspended"]


class ReplicaRange(ApiModel):
    min: Count = Field(
        default=1, ge=0, le=MAX_REPLICAS, description="The fewest replicas, whatever the load."
    )
    max: Count = Field(ge=1, le=MAX_REPLICAS, description="The most replicas.")

    @model_validator(mode="after")
    def _min_at_most_max(self) -> ReplicaRange:
        if self.min > self.max:
            raise field_error("min", f"must be <= max ({self.min} > {self.max})")
        return self


class ServiceAutoscaling(ApiModel):
    """Scale on load per replica and/or p99 latency; `predictive` scales ahead of forecast load."""

    target_requests_per_replica: float | None = Field(
        default=None, gt=0, description="Requests per second one replica should serve."
    )
    target_latency_p99_ms: float | None = Field(
        default=None, gt=0, description="The p99 latency to stay under, in milliseconds."
    )
    predictive: bool = Field(
        default=False, description="Scale ahead of the load the daily pattern forecasts, not only after it."
    )


class Rollout(ApiModel):
    max_surge: int = Field(default=1, ge=0, description="Replicas above the desired count during a rollout.")
    max_unavailable: int = Field(
        default=0, ge=0, description="Replicas that may be unready during a rollout."
    )

    @model_validator(mode="after")
    def _can_progress(self) -> Rollout:
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise field_error("maxSurge", "maxSurge and maxUnavailable cannot both be 0")
        return self


class InferenceServiceSpec(ApiModel):
    queue: str = Field(default=DEFAULT_QUEUE, description="The leaf queue the service is submitted to.")
    priority_class: PriorityClassName | None = Field(
        default=None,
        description="Its priority class: system-critical, production-inference, production-training, "
        "research, development (or one configured).",
    )
    model_version: str | None = Field(default=None, description="The ModelVersion it serves.")
    replicas: ReplicaRange = Field(description="The bounds of its replica count.")
    replica: PodRequest = Field(
        description="What each replica asks for: GPUs (whole, a share or MIG), CPU, memory."
    )
    autoscaling: ServiceAutoscaling = Field(
        default_factory=ServiceAutoscaling, description="What the replica count follows."
    )
    rollout: Rollout = Field(default_factory=Rollout, description="How a new version replaces the old.")
    preemptible: bool = Field(default=False, description="Whether the scheduler may evict its replicas.")
    suspend: bool = Field(
        default=False,
        description="true: every replica is removed and its GPUs released; false again: the replicas "
        "come back (Kueue's stop and resume).",
    )

    @field_validator("model_version")
    @classmethod
    def _version_names_a_model_version(cls, value: str | None) -> str | None:
        # A ModelVersion's name, which its replicas carry as their revision label.
        if value:
            check_name(value)
            check_label_value(value, f"the model version (its replicas' {REVISION_LABEL} label)")
        return value

    @model_validator(mode="after")
    def _template_asks_for_no_other_gpus(self, info: ValidationInfo) -> InferenceServiceSpec:
        if checked_on_write(info):
            check_template_gpus(self.replica, "replica")
        return self


class InferenceServiceStatus(ObjectStatus):
    phase: ServicePhase = Field(default="Pending", description="Pending, Running, Failed or Suspended.")
    desired_replicas: int = Field(default=0, ge=0, description="Replicas the autoscaler wants.")
    ready_replicas: int = Field(default=0, ge=0, description="Replicas serving.")
    # The replica-count history as an integral (`api.accounting.service_gpu_hours`): written when the
    # count of placed replicas changes, not as time passes, and read up to now by whoever prices it.
    gpu_hours: float = Field(
        default=0.0, ge=0, description="GPU-hours its placed replicas held up to `gpuHoursCountedTime`."
    )
    placed_gpus: float = Field(
        default=0.0,
        ge=0,
        description="GPUs its placed replicas hold since `gpuHoursCountedTime` (what gpuHours grows by).",
    )
    gpu_hours_counted_time: AwareDatetime | None = Field(
        default=None, description="When `gpuHours` was last brought up to date (it runs on from here)."
    )


class InferenceService(Resource):
    """Serving replicas of a model version (namespaced)."""

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["InferenceService"] = kind_field("InferenceService")
    spec: InferenceServiceSpec = Field(
        description="What the service asks for: queue, model, replicas and their bounds, autoscaling."
    )
    status: InferenceServiceStatus = Field(
        default_factory=InferenceServiceStatus,
        description="Its phase, desired and ready replicas, and why it waits.",
    )

    @model_validator(mode="after")
    def _name_is_a_label_value(self) -> InferenceService:
        name = self.metadata.name
        last = service_workload_name(name, self.spec.replicas.max - 1)
        check_name_in_labels({SERVICE_LABEL: name, WORKLOAD_LABEL: last}, "its replicas' pods")
        return self
