"""TrainingJob: a gang of identical workers, optionally elastic, that checkpoints and restarts."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field, ValidationInfo, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import PriorityClassName, checked_on_write
from gpufleet.api.requests import PodRequest, check_template_gpus
from gpufleet.api.resource import API_VERSION, Resource
from gpufleet.api.status import CheckpointRef, JobPhase, ObjectStatus

DEFAULT_QUEUE = "default"


class TopologyRequest(ApiModel):
    """Domain levels all pods must (required) or should (preferred) share: nvlink, host, rack, block...

    Level names are those of the fleet's topology; which exist is checked by the scheduler.
    """

    required: str | None = None
    preferred: str | None = None


class CheckpointPolicy(ApiModel):
    interval_seconds: float = Field(gt=0)
    uri: str | None = None


class RestartPolicy(ApiModel):
    max_restarts: int = Field(default=3, ge=0)
    backoff_seconds: float = Field(default=10.0, ge=0)


class TrainingJobSpec(ApiModel):
    """`min_replicas` below `replicas` makes the job elastic: it runs, and may be shrunk, down to it."""

    queue: str = DEFAULT_QUEUE
    priority_class: PriorityClassName | None = None
    user: str | None = None
    replicas: int = Field(ge=1)
    min_replicas: int | None = Field(default=None, ge=1)
    worker: PodRequest
    topology: TopologyRequest = Field(default_factory=TopologyRequest)
    checkpoint: CheckpointPolicy | None = None
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    preemptible: bool = True
    duration_seconds: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _min_at_most_replicas(self) -> TrainingJobSpec:
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise field_error("minReplicas", f"must be <= replicas ({self.min_replicas} > {self.replicas})")
        return self

    @model_validator(mode="after")
    def _template_asks_for_no_other_gpus(self, info: ValidationInfo) -> TrainingJobSpec:
        if checked_on_write(info):
            check_template_gpus(self.worker, "worker")
        return self

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None and self.min_replicas < self.replicas

    @property
    def min_count(self) -> int:
        """The fewest workers the job runs with (replicas when not elastic)."""
        return self.min_replicas if self.min_replicas is not None else self.replicas


class TrainingJobStatus(ObjectStatus):
    phase: JobPhase = "Pending"
    replicas: int = Field(default=0, ge=0, description="Workers currently placed.")
    ready_replicas: int = Field(default=0, ge=0)
    restarts: int = Field(default=0, ge=0)
    lost_gpu_seconds: float = Field(default=0.0, ge=0)
    last_checkpoint: CheckpointRef | None = None
    admitted_time: AwareDatetime | None = None
    start_time: AwareDatetime | None = None
    completion_time: AwareDatetime | None = None


class TrainingJob(Resource):
    """A gang of workers submitted to a queue (namespaced)."""

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    kind: Literal["TrainingJob"] = "TrainingJob"
    spec: TrainingJobSpec
    status: TrainingJobStatus = Field(default_factory=TrainingJobStatus)
