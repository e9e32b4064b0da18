"""The DRA driver's node side: prepare and unprepare of claims, and the node's slices kept current.

Prepare reads the claim from the API server (the kubelet sends only its namespace, name and UID),
takes the devices its `status.allocation` gives this driver in this node's pool, checks each is a
healthy device of this node, validates and applies the claim's opaque configs of this driver
(`gpuconfig.py`: TimeSlicing sets the GPUs' time slice, MPS is refused), writes the claim's CDI spec
(`cdi.py`; a MIG instance with its `/dev/nvidia-caps` nodes, `migcaps.py`), records the claim in the
checkpoint and returns the CDI device ids. A claim already in the checkpoint is answered from it
without reading the API server again (the kubelet calls prepare again after it restarts), its CDI
spec written again if it is gone (a reboot empties /var/run). Unprepare removes the spec, sets the
time slice of GPUs a TimeSlicing config set back to Default, and removes the checkpoint entry; a
claim never prepared here is already unprepared. A failure is reported for that claim only, as the
API asks, and the kubelet retries it.

Dynamic MIG (`dynmig.py`, given a `MigControl`): MIG-enabled GPUs publish every placement, prepare
creates the instance of each allocated placement (and destroys what it made if the claim then fails),
records it in the checkpoint and injects the new instance's UUID and caps nodes; unprepare destroys
it. At start the driver reconciles NVML's instances with the checkpoint, so a restart neither leaks
nor creates twice.

The slices: published at start, and again after every health change (a GPU that fails leaves the
pool's next generation, one that recovers comes back) and every resync interval (a slice someone
deleted comes back; the publisher writes nothing when nothing changed), through the publisher the CLI
gives.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.agent.dra import cdi
from gpufleet.agent.dra.checkpoint import Checkpoint, CreatedMig, PreparedClaim, PreparedDevice
from gpufleet.agent.dra.dynmig import DynamicMig, DynamicMigError
from gpufleet.agent.dra.gpuconfig import CONFIG_FIELD, TIME_SLICE_INTERVALS, ConfigError, device_sharing
from gpufleet.agent.dra.migcaps import MigCaps, MigCapsError
from gpufleet.agent.dra.slices import node_slice_specs
from gpufleet.agent.dra.timeslice import NvidiaSmi, TimeSliceError, TimeSlicer
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import NodeInfo, NvmlError
from gpufleet.agent.nvml.migctl import MigControl
from gpufleet.api.dra import ResourceClaim
from gpufleet.api.dra_claims import AllocationResult
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.sharing.dra_slices import DRIVER

log = logging.getLogger("gpufleet.agent.dra")

ClaimReader = Callable[[str, str], ResourceClaim | None]
"""Reads a ResourceClaim by namespace and name; None when there is none."""
SlicePublisher = Callable[[str, Callable[[int], list[ResourceSliceSpec]]], None]
"""Brings the node's slices in line with `wanted(generation)`, bumping the generation on a change."""


class PrepareError(Exception):
    """A claim that cannot be prepared on this node; the message names the claim and why."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} ({self.uid})"


class DraDriver:
    """Prepares this node's claims of `gpu.nvidia.com` and publishes its devices."""

    def __init__(
        self,
        node: NodeInfo,
        *,
        node_name: str,
        health: HealthState,
        read_claim: ClaimReader,
        publish: SlicePublisher | None,
        state_dir: Path,
        cdi_dir: Path = Path(cdi.CDI_DIR),
        mig_caps: MigCaps | None = None,
        common_edits: Mapping[str, Any] | None = None,
        time_slicer: TimeSlicer | None = None,
        mig_control: MigControl | None = None,
        on_mig_change: Callable[[], object] | None = None,
    ) -> None:
        self.node = node
        self.node_name = node_name
        self.health = health
        self.read_claim = read_claim
        self.publish = publish
        self.cdi_dir = cdi_dir
        self.mig_caps = mig_caps if mig_caps is not None else MigCaps()
        self.common_edits = common_edits
        self.time_slicer = time_slicer if time_slicer is not None else NvidiaSmi()
        self.checkpoint = Checkpoint(state_dir / "checkpoint.json")
        self.dynamic_mig = DynamicMig(node, mig_control, on_mig_change) if mig_control is not None else None
        self._devices = _device_table(node, dynamic_mig=self.dynamic_mig is not None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._prepare_lock = threading.Lock()
        self._reconcile_mig()

    def _reconcile_mig(self) -> None:
        """Dynamic MIG after a restart: NVML's instances brought in line with the checkpoint; a claim
        whose instances were made again (a reboot) has its CDI spec written again at its next prepare,
        with the new UUIDs and caps nodes."""
        if self.dynamic_mig is None:
            return
        claims = self.checkpoint.claims()
        remade = self.dynamic_mig.reconcile({uid: c.mig for uid, c in claims.items() if c.mig})
        for uid, instances in remade.items():
            self.checkpoint.put(uid, dataclasses.replace(claims[uid], mig=instances))
            cdi.remove_spec(self.cdi_dir, uid)

    # Claims
    def prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        """The claim's devices, prepared (or as prepared before); PrepareError when it cannot be."""
        with self._prepare_lock:
            done = self.checkpoint.get(ref.uid)
            if done is not None:
                # The CDI dir is often a tmpfs (/var/run) that a reboot empties while the checkpoint
                # stays: the runtime must still find the devices the kubelet is told of.
                if done.devices and not cdi.spec_path(self.cdi_dir, ref.uid).exists():
                    injected = [self._cdi_device(ref, d.device, done.mig) for d in done.devices]
                    # a reboot also reset the GPUs' time slices
                    self._set_time_slices(ref, done.time_sliced)
                    cdi.write_spec(self.cdi_dir, ref.uid, injected, self.common_edits)
                return done.devices
            claim = self.read_claim(ref.namespace, ref.name)
            if claim is None:
                raise PrepareError(f"{ref}: not found")
            if claim.metadata.uid != ref.uid:
                raise PrepareError(f"{ref}: the claim of that name has UID {claim.metadata.uid}")
            allocation = claim.status.allocation
            if allocation is None:
                raise PrepareError(f"{ref}: status.allocation is not set")
            ours = [r for r in allocation.devices.results if r.driver == DRIVER]
            by_device: dict[str, list[str]] = {}
            for result in ours:
                if result.pool != self.node_name:
                    raise PrepareError(
                        f"{ref}: status.allocation.devices.results names device {result.device} of pool "
                        f"{result.pool}, not of this node {self.node_name}"
                    )
                by_device.setdefault(result.device, []).append(result.request)
            created = self._create_mig(ref, list(by_device))
            try:
                injected = [self._cdi_device(ref, name, created) for name in by_device]
                time_sliced = self._apply_config(ref, allocation, [(r.request, r.device) for r in ours])
                if injected:
                    cdi.write_spec(self.cdi_dir, ref.uid, injected, self.common_edits)
            except BaseException:
                self._destroy_mig(created)  # nothing half prepared: the kubelet retries the claim
                raise
            devices = tuple(
                PreparedDevice(
                    requests=tuple(requests),
                    pool=self.node_name,
                    device=name,
                    cdi_device_ids=(cdi.device_id(ref.uid, name),),
                )
                for name, requests in by_device.items()
            )
            self.checkpoint.put(
                ref.uid, PreparedClaim(ref.namespace, ref.name, devices, time_sliced, tuple(created))
            )
            log.info("prepared %s: %s", ref, [d.device for d in devices] or "no devices of ours")
            return devices

    def unprepare(self, ref: ClaimRef) -> None:
        with self._prepare_lock:
            cdi.remove_spec(self.cdi_dir, ref.uid)
            done = self.checkpoint.get(ref.uid)
            if done is not None:
                if done.time_sliced:  # as NVIDIA's driver: back to the Default time slice
                    self.time_slicer.set_time_slice(list(done.time_sliced), TIME_SLICE_INTERVALS["Default"])
                # an NvmlError keeps the claim in the checkpoint: the kubelet retries the unprepare
                self._destroy_mig(done.mig)
                self.checkpoint.remove(ref.uid)
                log.info("unprepared %s", ref)

    def _create_mig(self, ref: ClaimRef, names: list[str]) -> list[CreatedMig]:
        """The MIG instances of the claim's dynamic placements, created; none left when one fails."""
        created: list[CreatedMig] = []
        if self.dynamic_mig is None:
            return created
        try:
            for name in names:
                placement = self.dynamic_mig.placement(name)
                if placement is None:
                    continue
                if not self.health.is_healthy(placement.gpu.uuid):
                    raise PrepareError(f"{ref}: device {name}: GPU {placement.gpu.uuid} is unhealthy")
                created.append(self.dynamic_mig.create(placement))
        except (DynamicMigError, PrepareError) as exc:
            self._destroy_mig(created)
            raise PrepareError(str(exc) if isinstance(exc, PrepareError) else f"{ref}: {exc}") from exc
        return created

    def _destroy_mig(self, created: Sequence[CreatedMig]) -> None:
        if self.dynamic_mig is None:
            return
        for instance in created:
            try:
                self.dynamic_mig.destroy(instance)
            except NvmlError:
                log.error("cannot destroy MIG device %s (%s)", instance.uuid, instance.device)
                raise

    def _is_mig(self, device: str) -> bool:
        known = self._devices.get(device)
        if known is not None:
            return known.mig is not None
        return self.dynamic_mig is not None and self.dynamic_mig.placement(device) is not None

    def _apply_config(
        self, ref: ClaimRef, allocation: AllocationResult, results: list[tuple[str, str]]
    ) -> dict[str, int]:
        """Validates the claim's configs of this driver for its devices and applies them; the GPUs
        whose time slice was set, with the interval."""
        try:
            sharing = device_sharing(
                allocation.devices.config,
                [(request, device, self._is_mig(device)) for request, device in results],
            )
        except ConfigError as exc:
            raise PrepareError(f"{ref}: {exc}") from exc
        time_sliced: dict[str, int] = {}
        for device, wanted in sharing.items():
            if wanted is None:
                continue
            if wanted.strategy == "MPS":
                # NVIDIA's driver starts an MPS control daemon per claim and points the container at
                # its pipe directory; this agent runs none, so the claim is refused, not half served.
                raise PrepareError(
                    f"{ref}: {CONFIG_FIELD}[{wanted.config_index}].opaque.parameters.sharing.strategy: "
                    f"MPS is not served by gpufleet's DRA driver (it runs no MPS control daemon); "
                    f"use TimeSlicing"
                )
            if wanted.interval is not None:
                time_sliced[self._devices[device].uuid] = TIME_SLICE_INTERVALS[wanted.interval]
        self._set_time_slices(ref, time_sliced)
        return time_sliced

    def _set_time_slices(self, ref: ClaimRef, time_sliced: Mapping[str, int]) -> None:
        by_interval: dict[int, list[str]] = {}
        for uuid, interval in time_sliced.items():
            by_interval.setdefault(interval, []).append(uuid)
        try:
            for interval, uuids in sorted(by_interval.items()):
                self.time_slicer.set_time_slice(uuids, interval)
        except TimeSliceError as exc:
            raise PrepareError(f"{ref}: applying the TimeSlicing config: {exc}") from exc

    def _cdi_device(self, ref: ClaimRef, name: str, created: Sequence[CreatedMig] = ()) -> cdi.CdiDevice:
        found = self._devices.get(name)
        made = next((c for c in created if c.device == name), None)
        if made is not None and self.dynamic_mig is not None:
            parent = next(g for g in self.dynamic_mig.gpus.values() if g.uuid == made.gpu_uuid)
            found = _NodeDevice(made.uuid, made.gpu_uuid, parent.minor_number, (made.gi_id, made.ci_id))
        if found is None:
            raise PrepareError(f"{ref}: device {name} is not a device of node {self.node_name}")
        if not self.health.is_healthy(found.uuid, found.parent_uuid):
            raise PrepareError(f"{ref}: device {name} ({found.uuid}) is unhealthy")
        nodes: tuple[cdi.DeviceNode, ...] = (cdi.DeviceNode(f"/dev/nvidia{found.minor}"),)
        if found.mig is not None:
            try:
                nodes += self.mig_caps.nodes(found.minor, *found.mig)
            except MigCapsError as exc:
                raise PrepareError(f"{ref}: device {name} ({found.uuid}): {exc}") from exc
        return cdi.CdiDevice(name=name, uuid=found.uuid, device_nodes=nodes)

    # Slices
    def wanted(self, generation: int) -> list[ResourceSliceSpec]:
        return node_slice_specs(
            self.node,
            self.node_name,
            self.health,
            generation=generation,
            dynamic_mig=self.dynamic_mig is not None,
        )

    def publish_slices(self) -> None:
        if self.publish is None:
            return
        try:
            self.publish(self.node_name, self.wanted)
        except Exception as exc:  # the API server may be away for a while; the next change or retry wins
            log.error("cannot publish the ResourceSlices of node %s: %s", self.node_name, exc)
            raise

    def start(self, retry_seconds: float = 10.0, resync_seconds: float = 60.0) -> None:
        """Publishes the slices now, after every health change and every `resync_seconds` (retrying a
        failed write after `retry_seconds`)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._follow,
            args=(retry_seconds, resync_seconds),
            name="gpufleet-dra-slices",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.health.wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _follow(self, retry_seconds: float, resync_seconds: float) -> None:
        version, published_at = -1, float("-inf")
        while not self._stop.is_set():
            seen = self.health.version
            if seen != version or time.monotonic() - published_at >= resync_seconds:
                try:
                    self.publish_slices()
                    version, published_at = seen, time.monotonic()
                except Exception:
                    self._stop.wait(retry_seconds)
                    continue
            self.health.wait_for_change(
                version, self._stop.is_set, timeout=min(retry_seconds, resync_seconds)
            )


@dataclass(frozen=True, slots=True)
class _NodeDevice:
    uuid: str
    parent_uuid: str | None
    minor: int
    """The GPU's (a MIG instance's parent's) minor: `/dev/nvidia<minor>`."""
    mig: tuple[int, int] | None
    """A MIG instance's GPU and compute instance ids."""


def _device_table(node: NodeInfo, *, dynamic_mig: bool = False) -> dict[str, _NodeDevice]:
    """Device name in the pool -> what injecting it takes, named as the builder names them
    (`gpu-<index>`, `gpu-<index>-mig-<GI profile>-<start>-<size>`). With dynamic MIG a MIG-enabled
    GPU's instances are the claims' (made at prepare), not those discovery saw."""
    table: dict[str, _NodeDevice] = {}
    for gpu in node.gpus:
        table[f"gpu-{gpu.index}"] = _NodeDevice(gpu.uuid, None, gpu.minor_number, None)
        for m in () if dynamic_mig and gpu.mig_enabled else gpu.mig_devices:
            name = f"gpu-{gpu.index}-mig-{m.gi_profile_id}-{m.placement_start}-{m.placement_size}"
            table[name] = _NodeDevice(m.uuid, gpu.uuid, gpu.minor_number, (m.gi_id, m.ci_id))
    return table


def prepare_all(driver: DraDriver, refs: Sequence[ClaimRef]) -> dict[str, tuple[PreparedDevice, ...] | str]:
    """Each claim's devices, or the error preparing it, by UID."""
    out: dict[str, tuple[PreparedDevice, ...] | str] = {}
    for ref in refs:
        try:
            out[ref.uid] = driver.prepare(ref)
        except PrepareError as exc:
            out[ref.uid] = str(exc)
        except Exception as exc:  # the API server unreachable, a full disk: the kubelet retries
            log.error("preparing %s failed: %s", ref, exc)
            out[ref.uid] = f"{ref}: {exc}"
    return out
