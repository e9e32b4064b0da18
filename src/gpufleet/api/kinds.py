"""The kind registry: every kind gpufleet stores or loads, listed here and nowhere else.

`BUILTIN_KINDS` is the one list of gpufleet's kinds, in a fixed order: `gpufleet manifests crds` emits
the CustomResourceDefinitions in it and the API's discovery lists the kinds in it, whichever modules a
process happened to import first. Code outside gpufleet (a test, an extension) adds a kind of its own
with `register_kind`, explicitly, and the store and loader accept it without change.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Final

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.cluster import Cluster
from gpufleet.api.dra import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from gpufleet.api.inference import InferenceService
from gpufleet.api.model_version import ModelVersion
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import Queue
from gpufleet.api.resource import KindInfo, PrinterColumn, Resource
from gpufleet.api.runtime import Event, Node, Pod, ServiceLoad, Workload
from gpufleet.api.scenario import Scenario
from gpufleet.api.secret import Secret
from gpufleet.api.training import TrainingJob

_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")

# The order is the one the CRDs have always been generated in: keep it, or the manifests change.
BUILTIN_KINDS: Final[tuple[KindInfo, ...]] = (
    KindInfo.of(
        Checkpoint,
        plural="checkpoints",
        short_names=("ckpt",),
        printer_columns=(
            PrinterColumn("Job", ".spec.job"),
            PrinterColumn("Step", ".spec.step", "integer"),
            PrinterColumn("Phase", ".status.phase"),
            _AGE,
        ),
    ),
    KindInfo.of(
        TrainingJob,
        plural="trainingjobs",
        short_names=("tj",),
        printer_columns=(
            PrinterColumn("Queue", ".spec.queue"),
            PrinterColumn("Replicas", ".spec.replicas", "integer"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Reason", ".status.pendingReason.type"),
            PrinterColumn("Restarts", ".status.restarts", "integer"),
            _AGE,
            PrinterColumn("Nodes", ".status.nodes", priority=1),
        ),
    ),
    KindInfo.of(
        InferenceService,
        plural="inferenceservices",
        short_names=("gisvc",),
        printer_columns=(
            PrinterColumn("Queue", ".spec.queue"),
            PrinterColumn("Model", ".spec.modelVersion"),
            PrinterColumn("Ready", ".status.readyReplicas", "integer"),
            PrinterColumn("Desired", ".status.desiredReplicas", "integer"),
            PrinterColumn("Phase", ".status.phase"),
            _AGE,
        ),
    ),
    KindInfo.of(
        ModelVersion,
        plural="modelversions",
        short_names=("mv",),
        printer_columns=(
            PrinterColumn("Model", ".spec.model"),
            PrinterColumn("Version", ".spec.version"),
            PrinterColumn("Phase", ".status.phase"),
            _AGE,
        ),
    ),
    KindInfo.of(
        GPUPool,
        plural="gpupools",
        short_names=("gp", "pool"),
        printer_columns=(
            PrinterColumn("Model", ".spec.gpuModel"),
            PrinterColumn("GPUs/Node", ".spec.gpusPerNode", "integer"),
            PrinterColumn("Nodes", ".status.nodes", "integer"),
            PrinterColumn("Ready", ".status.readyNodes", "integer"),
            PrinterColumn("Capacity", ".spec.capacityType"),
            _AGE,
        ),
    ),
    KindInfo.of(
        Queue,
        plural="queues",
        short_names=("gq",),
        printer_columns=(
            PrinterColumn("Parent", ".spec.parent"),
            PrinterColumn("Weight", ".spec.fairShareWeight", "number"),
            PrinterColumn("Pending", ".status.pendingWorkloads", "integer"),
            PrinterColumn("Admitted", ".status.admittedWorkloads", "integer"),
            _AGE,
        ),
    ),
    # The embedded world's own kinds: every process that opens a store can read what the control plane
    # wrote into it.
    KindInfo.of(
        Node,
        plural="nodes",
        short_names=("no",),
        printer_columns=(
            # kubectl's heading; the CLI shows a cordoned node as Ready,SchedulingDisabled, as kubectl does
            PrinterColumn("Status", ".status.phase"),
            PrinterColumn("Pool", ".spec.pool"),
            PrinterColumn("Model", ".spec.gpuModel"),
            PrinterColumn("GPUs", ".spec.gpus", "integer"),
            PrinterColumn("Unhealthy", ".status.unhealthyGpus", "integer", "GPUs that failed."),
        ),
        crd=False,
    ),
    KindInfo.of(
        Pod,
        plural="pods",
        short_names=("po",),
        printer_columns=(
            PrinterColumn("Node", ".spec.nodeName"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Reason", ".status.reason"),
        ),
        crd=False,
    ),
    KindInfo.of(
        Workload,
        plural="workloads",
        short_names=("wl",),
        printer_columns=(
            PrinterColumn("Queue", ".spec.queue"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Reason", ".status.pendingReason.type"),
        ),
        crd=False,
    ),
    KindInfo.of(
        Event,
        plural="events",
        short_names=("ev",),
        printer_columns=(
            PrinterColumn("Object", ".spec.involvedName"),
            PrinterColumn("Reason", ".spec.reason"),
            PrinterColumn("Message", ".spec.message"),
        ),
        crd=False,
    ),
    KindInfo.of(ServiceLoad, plural="serviceloads"),
    # Federation: a worker cluster in the management plane (after the older kinds, keeping their order).
    KindInfo.of(
        Cluster,
        plural="clusters",
        short_names=("gcl",),
        printer_columns=(
            PrinterColumn("Region", ".spec.region"),
            PrinterColumn("Zone", ".spec.zone"),
            PrinterColumn("Running", ".status.runningWorkloads", "integer"),
            PrinterColumn("Heartbeat", ".status.heartbeatTime", "date"),
            PrinterColumn("Drain", ".spec.drain.running"),
            _AGE,
        ),
    ),
    # A what-if for `gpufleet scenario`: loaded from YAML, never stored.
    KindInfo.of(Scenario, plural="scenarios", crd=False),
    # Dynamic Resource Allocation (resource.k8s.io/v1): Kubernetes' own kinds, stored by the embedded
    # world (the twin's nodes publish slices; claims are allocated by the scheduler), never CRDs.
    KindInfo.of(DeviceClass, plural="deviceclasses", crd=False),
    KindInfo.of(
        ResourceSlice,
        plural="resourceslices",
        printer_columns=(PrinterColumn("Node", ".spec.nodeName"), PrinterColumn("Driver", ".spec.driver")),
        crd=False,
    ),
    KindInfo.of(ResourceClaim, plural="resourceclaims", crd=False),
    KindInfo.of(ResourceClaimTemplate, plural="resourceclaimtemplates", crd=False),
    # Credentials the embedded world keeps (a federation worker's token); Kubernetes has its own Secret.
    KindInfo.of(
        Secret, plural="secrets", printer_columns=(PrinterColumn("Type", ".spec.type"), _AGE), crd=False
    ),
)

_lock = threading.Lock()
_kinds: dict[str, KindInfo] = {info.kind: info for info in BUILTIN_KINDS}
_BUILTIN_NAMES: Final = frozenset(_kinds)


def register_kind(
    model: type[Resource],
    *,
    plural: str,
    short_names: tuple[str, ...] = (),
    printer_columns: tuple[PrinterColumn, ...] = (),
    crd: bool = True,
) -> KindInfo:
    """Makes a kind defined outside gpufleet known to the loader, the store and (with `crd`) the CRD
    generator, after the built-in ones. Registering the same model again is harmless; a built-in kind's
    name, or another model under a taken one, is a programming error."""
    info = KindInfo.of(
        model, plural=plural, short_names=short_names, printer_columns=printer_columns, crd=crd
    )
    if info.kind in _BUILTIN_NAMES:
        raise RuntimeError(f"kind {info.kind} is built in: its registration is BUILTIN_KINDS")
    with _lock:
        existing = _kinds.get(info.kind)
        if existing is not None and existing.model is not model:
            raise RuntimeError(f"kind {info.kind} is already registered by {existing.model.__qualname__}")
        _kinds[info.kind] = info
    return info


def unregister_kind(kind: str) -> None:
    """Forgets a kind `register_kind` added (a test's own kind, once the test is done)."""
    if kind in _BUILTIN_NAMES:
        raise RuntimeError(f"kind {kind} is built in and cannot be unregistered")
    with _lock:
        _kinds.pop(kind, None)


def kind_info(kind: str) -> KindInfo | None:
    """The registration of a kind, or None. Read without the lock: one lookup in a dict is atomic, and
    every store write and read asks (registrations take the lock against each other)."""
    return _kinds.get(kind)


def registered_kinds() -> Iterator[KindInfo]:
    """Every registered kind: the built-in ones in their fixed order, then the others as registered."""
    with _lock:
        return iter(list(_kinds.values()))
