"""Resource kinds, YAML load/dump, quantities and the errors users can cause.

The kinds the loader, the store and the CRD generator know are listed in `gpufleet.api.kinds`.

The names below are imported on first use (PEP 562), so a process that needs one error class or
the quantity parser does not load every kind's model: `gpufleet kube scheduler` starts listing the
cluster sooner. `gpufleet.api.kinds` still imports every kind the registry lists.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from gpufleet.api.resource import API_VERSION, GROUP, VERSION, KindInfo, PrinterColumn, Resource
    from gpufleet.api.status import CheckpointRef, JobPhase, ObjectStatus
    from gpufleet.api.training import TrainingJob, TrainingJobSpec, TrainingJobStatus
    from gpufleet.api.validation import parse_object

_HOME: dict[str, str] = {
    "API_VERSION": "resource",
    "ApiModel": "base",
    "Checkpoint": "checkpoint",
    "CheckpointRef": "status",
    "CheckpointSpec": "checkpoint",
    "CheckpointStatus": "checkpoint",
    "Cluster": "cluster",
    "ClusterSpec": "cluster",
    "ClusterStatus": "cluster",
    "Condition": "meta",
    "DEFAULT_PRIORITY_CLASSES": "fields",
    "GPUPool": "pool",
    "GPUPoolSpec": "pool",
    "GPUPoolStatus": "pool",
    "GROUP": "resource",
    "InferenceService": "inference",
    "InferenceServiceSpec": "inference",
    "InferenceServiceStatus": "inference",
    "JobPhase": "status",
    "KindInfo": "resource",
    "LabelSelector": "labels",
    "MigProfileName": "fields",
    "ModelVersion": "model_version",
    "ModelVersionSpec": "model_version",
    "ModelVersionStatus": "model_version",
    "ObjectMeta": "meta",
    "ObjectStatus": "status",
    "PendingReason": "meta",
    "PodRequest": "requests",
    "PrinterColumn": "resource",
    "PriorityClassName": "fields",
    "Quantity": "fields",
    "Queue": "queue",
    "QueueSpec": "queue",
    "QueueStatus": "queue",
    "Resource": "resource",
    "TrainingJob": "training",
    "TrainingJobSpec": "training",
    "TrainingJobStatus": "training",
    "VERSION": "resource",
    "dump_objects": "documents",
    "field_error": "base",
    "kind_info": "kinds",
    "load_objects": "documents",
    "parse_object": "validation",
    "priority_value": "fields",
    "register_kind": "kinds",
    "registered_kinds": "kinds",
    "set_condition": "meta",
}

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


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'gpufleet.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gpufleet.api.{module}"), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
