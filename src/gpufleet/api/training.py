"""TrainingJob: a gang of identical workers, optionally elastic, that checkpoints and restarts."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field, ValidationInfo, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.fields import MAX_REPLICAS, Count, PriorityClassName, checked_on_write
from gpufleet.api.labels import JOB_LABEL, WORKLOAD_LABEL, job_workload_name
from gpufleet.api.meta import check_name_in_labels
from gpufleet.api.requests import PodRequest, check_template_gpus
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.status import CheckpointRef, JobPhase, ObjectStatus

DEFAULT_QUEUE = "default"


class TopologyRequest(ApiModel):
    """Domain levels all pods must (required) or should (preferred) share: nvlink, host, rack, block...

    Level names are those of the fleet's topology; which exist is checked by the scheduler.
    """

    required: str | None = Field(
        default=None,
        description="A level all pods must share one domain of (nvlink, host, rack, block, or another of "
        "the fleet's levels); absent: none.",
    )
    preferred: str | None = Field(
        default=None, description="A level all pods should share one domain of, where one has room."
    )


MIN_CHECKPOINT_SECONDS = 1.0
"""The shortest checkpoint interval. In the embedded world the twin writes each checkpoint: a job
asking for one every microsecond kept it writing them and starved every other tenant's job."""


class CheckpointPolicy(ApiModel):
    interval_seconds: float = Field(
        ge=MIN_CHECKPOINT_SECONDS,
        allow_inf_nan=False,
        description="How often the job checkpoints, in seconds (at least 1).",
    )
    uri: str | None = Field(default=None, description="Where the checkpoints go, e.g. s3://ckpt/llm.")


class RestartPolicy(ApiModel):
    max_restarts: int = Field(
        default=3, ge=0, description="Restarts (after a failure or an eviction) before the job fails."
    )
    backoff_seconds: float = Field(default=10.0, ge=0, description="Wait before each restart, in seconds.")


class TrainingJobSpec(ApiModel):
    """`min_replicas` below `replicas` makes the job elastic: it runs, and may be shrunk, down to it."""

    queue: str = Field(default=DEFAULT_QUEUE, description="The leaf queue the job is submitted to.")
    priority_class: PriorityClassName | None = Field(
        default=None,
        description="Its priority class: system-critical, production-inference, production-training, "
        "research, development (or one configured).",
    )
    user: str | None = Field(
        default=None, description="Who submitted it: fair share between users of a queue."
    )
    replicas: Count = Field(ge=1, le=MAX_REPLICAS, description="Workers the job runs with.")
    min_replicas: Count | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICAS,
        description="The fewest workers it runs with; below replicas makes the job elastic: it may start "
        "with fewer and be shrunk down to it rather than evicted.",
    )
    worker: PodRequest = Field(description="What each worker asks for: GPUs, CPU, memory.")
    topology: TopologyRequest = Field(
        default_factory=TopologyRequest, description="Domains the workers must or should share."
    )
    checkpoint: CheckpointPolicy | None = Field(
        default=None, description="How the job checkpoints; absent: never, so a restart starts over."
    )
    restart_policy: RestartPolicy = Field(
        default_factory=RestartPolicy, description="How often and how soon it restarts."
    )
    preemptible: bool = Field(default=True, description="Whether the scheduler may evict it for other work.")
    suspend: bool = Field(
        default=False,
        description="true: its workers are stopped and its GPUs released, as a preemption would (the "
        "work since its last checkpoint is lost, and it counts as a restart); false again: it queues "
        "again and resumes from its last checkpoint (Kueue's stop and resume).",
    )
    duration_seconds: float | None = Field(
        default=None, gt=0, description="Embedded world: how long the job computes at full size."
    )

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
    phase: JobPhase = Field(
        default="Pending", description="Pending, Admitted, Running, Succeeded, Failed or Suspended."
    )
    replicas: int = Field(default=0, ge=0, description="Workers currently placed.")
    ready_replicas: int = Field(default=0, ge=0, description="Workers running.")
    nodes: list[str] = Field(
        default_factory=list, description="The nodes its current workers are placed on, sorted."
    )
    restarts: int = Field(default=0, ge=0, description="Times the job restarted.")
    lost_gpu_seconds: float = Field(
        default=0.0,
        ge=0,
        description="GPU-seconds of work lost to restarts (each time since the last checkpoint).",
    )
    last_checkpoint: CheckpointRef | None = Field(default=None, description="The checkpoint it resumes from.")
    admitted_time: AwareDatetime | None = Field(default=None, description="When it was last admitted.")
    start_time: AwareDatetime | None = Field(default=None, description="When its workers last started.")
    completion_time: AwareDatetime | None = Field(default=None, description="When it succeeded or failed.")


class TrainingJob(Resource):
    """A gang of workers submitted to a queue (namespaced)."""

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["TrainingJob"] = kind_field("TrainingJob")
    spec: TrainingJobSpec = Field(
        description="What the job asks for: queue, workers, topology, checkpoints, restarts."
    )
    status: TrainingJobStatus = Field(
        default_factory=TrainingJobStatus,
        description="Its phase, workers, restarts, lost work and why it waits.",
    )

    @model_validator(mode="after")
    def _name_is_a_label_value(self) -> TrainingJob:
        name = self.metadata.name
        check_name_in_labels({JOB_LABEL: name, WORKLOAD_LABEL: job_workload_name(name)}, "its pods")
        return self
