"""Dynamic MIG for the DRA driver, as NVIDIA's DRA driver for GPUs does it (its DynamicMIG feature): a
MIG-enabled GPU publishes every placement the catalogue allows as a partitionable device (all consuming
the GPU's counters, so the scheduler never hands out overlapping ones), and the instance of an
allocated placement is created only at prepare, destroyed at unprepare.

The agent owns the MIG layout of such GPUs: an instance no prepared claim records (left by a crash
between creating it and writing the checkpoint, or made by hand) is destroyed when the driver starts,
and an instance a prepared claim records that is gone (a reboot clears every MIG instance) is created
again at its placement. A placement that overlaps an instance that exists is refused naming it; the
scheduler's counters make that an accident (another tool's instance), never the normal case.

Device names are the slice builder's: `gpu-<index>-mig-<GI profile id>-<start>-<size>`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.agent.dra.checkpoint import CreatedMig
from gpufleet.agent.migparted import gpu_model
from gpufleet.agent.nvml import Gpu, NodeInfo, NvmlError
from gpufleet.agent.nvml.migctl import MigControl, MigInstanceState
from gpufleet.sharing import mig

log = logging.getLogger("gpufleet.agent.dra")

_NAME = re.compile(r"gpu-(\d+)-mig-(\d+)-(\d+)-(\d+)")


class DynamicMigError(Exception):
    """A placement that cannot be created; the message names the device and why."""


@dataclass(frozen=True, slots=True)
class Placement:
    """A MIG device the driver may create: a GPU instance profile at a start slot of a GPU."""

    device: str
    gpu: Gpu
    profile: mig.MigProfile
    start: int

    @property
    def size(self) -> int:
        return self.profile.memory_slices

    def overlaps(self, other: MigInstanceState) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


class DynamicMig:
    """Creates and destroys the MIG instances of this node's MIG-enabled GPUs for claims."""

    def __init__(
        self, node: NodeInfo, control: MigControl, on_change: Callable[[], object] | None = None
    ) -> None:
        self.control = control
        self.gpus = {gpu.index: gpu for gpu in node.gpus if gpu.mig_enabled}
        # Called after every instance created or destroyed, so the agent's exporter and health checks
        # (which discovered the node at start) follow the layout (`agent/nodeview.py`).
        self.on_change = on_change

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def placement(self, device: str) -> Placement | None:
        """The placement a device name stands for, None when it is not one of a dynamic GPU's."""
        match = _NAME.fullmatch(device)
        if match is None:
            return None
        index, profile_id, start, size = (int(g) for g in match.groups())
        gpu = self.gpus.get(index)
        if gpu is None:
            return None
        profile = next(
            (p for p in mig.catalogue(gpu_model(gpu)).values() if p.gi_profile_id == profile_id), None
        )
        if profile is None or start not in profile.starts or size != profile.memory_slices:
            return None
        return Placement(device, gpu, profile, start)

    def create(self, placement: Placement) -> CreatedMig:
        """The instance at `placement`, created; DynamicMigError when the slots are taken or NVML fails."""
        where = f"device {placement.device} ({placement.profile.name} at memory slices " + (
            f"{placement.start}-{placement.start + placement.size - 1} of GPU {placement.gpu.index})"
        )
        try:
            existing = self.control.instances(placement.gpu.uuid)
        except NvmlError as exc:
            raise DynamicMigError(f"{where}: {exc}") from exc
        taken = next((m for m in existing if placement.overlaps(m)), None)
        if taken is not None:
            raise DynamicMigError(
                f"{where}: the placement is already taken by MIG device {taken.uuid} (GPU instance "
                f"{taken.gi_id}, memory slices {taken.start}-{taken.start + taken.size - 1})"
            )
        try:
            made = self.control.create(
                placement.gpu.uuid,
                placement.profile.gi_profile_id,
                placement.start,
                placement.size,
                placement.profile.compute_slices,
            )
        except NvmlError as exc:
            raise DynamicMigError(f"{where}: {exc}") from exc
        log.info("created MIG device %s (%s) for %s", made.uuid, placement.profile.name, placement.device)
        self._changed()
        return CreatedMig(placement.device, made.gpu_uuid, made.gi_id, made.ci_id, made.uuid)

    def destroy(self, created: CreatedMig) -> None:
        self.control.destroy(created.gpu_uuid, created.gi_id, created.ci_id)
        log.info("destroyed MIG device %s (%s)", created.uuid, created.device)
        self._changed()

    def reconcile(self, recorded: dict[str, tuple[CreatedMig, ...]]) -> dict[str, tuple[CreatedMig, ...]]:
        """Brings NVML in line with the prepared claims' instances (claim UID -> instances): destroys
        the instances no claim records (one NVML will not destroy is logged and left), and creates
        again those recorded but gone. Returns the claims whose instances were created again, with
        their new identities."""
        existing = {m.uuid: m for gpu in self.gpus.values() for m in self.control.instances(gpu.uuid)}
        wanted = {c.uuid for instances in recorded.values() for c in instances}
        for instance in existing.values():
            if instance.uuid not in wanted:
                log.warning(
                    "destroying MIG device %s (GPU instance %d): no prepared claim holds it",
                    instance.uuid,
                    instance.gi_id,
                )
                try:
                    self.control.destroy(instance.gpu_uuid, instance.gi_id, instance.ci_id)
                    self._changed()
                except NvmlError as exc:
                    # in use by a process (mig-parted's layout still running work): the agent starts
                    # anyway, and a claim whose placement overlaps it is refused naming it
                    log.error("cannot destroy MIG device %s: %s", instance.uuid, exc)
        remade: dict[str, tuple[CreatedMig, ...]] = {}
        for uid, instances in recorded.items():
            if all(c.uuid in existing for c in instances):
                continue
            again = []
            for c in instances:
                placement = self.placement(c.device)
                if c.uuid in existing or placement is None:
                    again.append(c)
                    continue
                again.append(self.create(placement))
            remade[uid] = tuple(again)
        return remade
