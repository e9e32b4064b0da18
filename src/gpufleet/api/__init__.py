"""Resource kinds, YAML load/dump, quantities and the errors users can cause.

The kinds the loader, the store and the CRD generator know are listed in `gpufleet.api.kinds`.
"""

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec, CheckpointStatus
from gpufleet.api.cluster import Cluster, ClusterSpec, ClusterStatus
from gpufleet.api.documents import dump_objects, load_objects
from gpufleet.api.fields import (
    DEFAULT_PRIORITY_CLASSES,
    MigProfileName,
    PriorityClassName,
    Quantity,
    priority_value,
)
from gpufleet.api.inference import InferenceService, InferenceServiceSpec, InferenceServiceStatus
from gpufleet.api.kinds import kind_info, register_kind, registered_kinds
from gpufleet.api.labels import LabelSelector
from gpufleet.api.meta import Condition, ObjectMeta, PendingReason, set_condition
from gpufleet.api.model_version import ModelVersion, ModelVersionSpec, ModelVersionStatus
from gpufleet.api.pool import GPUPool, GPUPoolSpec, GPUPoolStatus
from gpufleet.api.queue import Queue, QueueSpec, QueueStatus
from gpufleet.api.requests import PodRequest
from gpufleet.api.resource import (
    API_VERSION,
    GROUP,
    VERSION,
    KindInfo,
    PrinterColumn,
    Resource,
)
from gpufleet.api.status import CheckpointRef, JobPhase, ObjectStatus
from gpufleet.api.training import TrainingJob, TrainingJobSpec, TrainingJobStatus
from gpufleet.api.validation import parse_object

__all__ = [
    "API_VERSION",
    "DEFAULT_PRIORITY_CLASSES",
    "GROUP",
    "VERSION",
    "ApiModel",
    "Checkpoint",
    "CheckpointRef",
    "CheckpointSpec",
    "CheckpointStatus",
    "Cluster",
    "ClusterSpec",
    "ClusterStatus",
    "Condition",
    "GPUPool",
    "GPUPoolSpec",
    "GPUPoolStatus",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
    "JobPhase",
    "KindInfo",
    "LabelSelector",
    "MigProfileName",
    "ModelVersion",
    "ModelVersionSpec",
    "ModelVersionStatus",
    "ObjectMeta",
    "ObjectStatus",
    "PendingReason",
    "PodRequest",
    "PrinterColumn",
    "PriorityClassName",
    "Quantity",
    "Queue",
    "QueueSpec",
    "QueueStatus",
    "Resource",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "dump_objects",
    "field_error",
    "kind_info",
    "load_objects",
    "parse_object",
    "priority_value",
    "register_kind",
    "registered_kinds",
    "set_condition",
]
