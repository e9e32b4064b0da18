"""The fleet's free capacity, kept in numpy arrays and updated incrementally.

Every array is indexed by a node's row. Rows are never reused while a fleet lives, so a row number is a
stable node handle for the scheduler. Capacity grows by doubling, so adding nodes one at a time stays
amortised O(1). Allocation and release touch only the rows and domains they change: nothing is rebuilt
per decision, which is what lets one cycle over thousands of nodes stay cheap.

What-ifs: the scheduler tries tentative work inside a `Statement` (scheduler/statement.py) whose undo
restores these arrays exactly, so a cycle needs no copy. `copy()` exists for the rarer case of a view that
must outlive a cycle or diverge from the authority (Kueue's cache/snapshot split).
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.api.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.api.versions import parse_driver_version
from gpufleet.fleet import cuda, dynmig
from gpufleet.fleet.devices import DeviceId, NodeDevices
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.dra_view import DeviceView
from gpufleet.fleet.dynmig import MigInstance as _MigInstance
from gpufleet.fleet.dynmig import MigSlot as MigSlot
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest, Taint
from gpufleet.fleet.touched import TouchedRows
from gpufleet.sharing import mig

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
RowArray = npt.NDArray[np.intp]

MODE_CODES = {mode: code for code, mode in enumerate(SharingMode)}
MIG_CODE = MODE_CODES[SharingMode.MIG]
DYNAMIC_CODE = MODE_CODES[SharingMode.DYNAMIC]
WHOLE_MODES = np.array(
    [mode in (SharingMode.DYNAMIC, SharingMode.EXCLUSIVE) for mode in SharingMode], dtype=np.bool_
)
SHARE_MODES = np.array(
    [mode in (SharingMode.DYNAMIC, SharingMode.TIME_SLICING, SharingMode.MPS) for mode in SharingMode],
    dtype=np.bool_,
)
# Built-in topology levels below the labelled ones: the node itself and an NVLink domain inside it.
HOST_LEVEL = "host"
NVLINK_LEVEL = "nvlink"


# Arrays indexed by node row first; they grow together.
_ROW_ARRAYS = (
    "alive",
    "schedulable",
    "cpu_cap",
    "cpu_free",
    "mem_cap",
    "mem_free",
    "gpu_count",
    "model",
    "mode",
    "replicas",
    "gpu_free",
    "gpu_ok",
    "gpu_pods",
    "nvlink",
    "whole_free",
    "free_milli",
    "share_free",
    "mig_free",
    "tainted",
    "driver",
)


class AllocationError(RuntimeError):
    """An allocation would break the fleet's invariants: a scheduler bug, never a user error."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """Exactly what one pod holds on one node: whole GPUs (milli 1000), a share of one GPU, or a MIG slot."""

    pod: str
    node: int
    gpus: tuple[int, ...]
    milli: int
    cpu_milli: int
    memory_mib: int
    mig: MigSlot | None = None
    devices: tuple[DeviceId, ...] = ()
    """DRA devices (driver, pool, device) the pod's own ResourceClaims were allocated."""
    shared: tuple[ClaimAllocation, ...] = ()
    """DRA: the shared ResourceClaims the pod uses (held by the claim while any of its pods runs)."""

    @property
    def gpu_milli_total(self) -> int:
        return self.milli * len(self.gpus)


class FleetState:
    """Nodes, GPUs, topology domains and allocations of one fleet.

    `topology_levels` are node label keys from coarse to fine (e.g. zone, block, rack). `nvlink_level`
    names the one among them whose domains are rack-scale NVLink fabrics (NVL72), if any.
    """

    def __init__(
        self,
        topology_levels: Sequence[str] = (),
        *,
        nvlink_level: str | None = None,
        max_gpus: int = 8,
        capacity: int = 64,
    ) -> None:
        self.levels: tuple[str, ...] = tuple(topology_levels)
        if len(set(self.levels)) != len(self.levels):
            raise ValidationError(
                f"topology levels repeat a name: {list(self.levels)}", field="topologyLevels"
            )
        if NVLINK_LEVEL in self.levels:
            raise ValidationError(
                "'nvlink' is the built-in level inside a host; declare a rack-scale fabric under another "
                "label and name it as the nvlink level",
                field="topologyLevels",
            )
        if nvlink_level is not None and nvlink_level not in self.levels:
            raise ValidationError(
                f"nvlink level {nvlink_level!r} is not one of the topology levels {list(self.levels)}",
                field="nvlinkLevel",
            )
        self.nvlink_level = nvlink_level
        self._cap = max(capacity, 1)
        self.max_gpus = max(max_gpus, 1)
        self.n_rows = 0
        # Bumped whenever something the static filters read changes (nodes, cordon, taints, labels), so
        # the scheduler can cache per-request masks between such changes.
        self.generation = 0
        self.health_changes = 0
        """Bumped whenever a GPU turns healthy or unhealthy (which moves no generation)."""
        self.names: list[str] = []
        self.specs: list[NodeSpec] = []
        self.taints: list[tuple[Taint, ...]] = []
        self.index: dict[str, int] = {}
        self.models: list[str] = []
        self._model_index: dict[str, int] = {}
        self.allocations: dict[str, Allocation] = {}
        self.node_pods: list[set[str]] = []
        self._mig: list[dict[int, list[_MigInstance]]] = []
        self.mig_profiles: list[str] = []
        self._mig_profile_index: dict[str, int] = {}
        self.domain_keys: list[list[tuple[str, ...]]] = [[] for _ in self.levels]
        self._domain_index: list[dict[tuple[str, ...], int]] = [{} for _ in self.levels]
        self._members: dict[int, tuple[int, RowArray, IntArray]] = {}
        self.devices = DeviceView()
        self.touched = TouchedRows()
        """Rows allocated on, released on or whose GPU health changed (`fleet.touched`); the generation
        covers every other change."""
        self._alloc_arrays()

    # ----------------------------------------------------------------- arrays
    def _alloc_arrays(self) -> None:
        cap, g = self._cap, self.max_gpus
        self.alive = np.zeros(cap, dtype=np.bool_)
        self.schedulable = np.zeros(cap, dtype=np.bool_)
        self.tainted = np.zeros(cap, dtype=np.bool_)
        self.cpu_cap = np.zeros(cap, dtype=np.int64)
        self.cpu_free = np.zeros(cap, dtype=np.int64)
        self.mem_cap = np.zeros(cap, dtype=np.int64)
        self.mem_free = np.zeros(cap, dtype=np.int64)
        self.gpu_count = np.zeros(cap, dtype=np.int64)
        self.model = np.full(cap, -1, dtype=np.int64)
        self.mode = np.zeros(cap, dtype=np.int64)
        self.replicas = np.ones(cap, dtype=np.int64)
        self.gpu_free = np.zeros((cap, g), dtype=np.int64)
        self.gpu_ok = np.zeros((cap, g), dtype=np.bool_)
        self.gpu_pods = np.zeros((cap, g), dtype=np.int64)
        self.nvlink = np.full((cap, g), -1, dtype=np.int64)
        self.whole_free = np.zeros(cap, dtype=np.int64)
        # Free milli per node over its healthy GPUs: what fill-level scores read, kept so that scoring
        # thousands of rows need not gather and sum the per-GPU matrix for every pod.
        self.free_milli = np.zeros(cap, dtype=np.int64)
        # The most free milli on one healthy GPU that can take one more share pod (replicas left): a
        # share pod fits a node iff its milli is at most this.
        self.share_free = np.zeros(cap, dtype=np.int64)
        self.domain = np.full((len(self.levels), cap), -1, dtype=np.int64)
        self.domain_whole_free: list[IntArray] = [np.zeros(16, dtype=np.int64) for _ in self.levels]
        self.mig_free = np.zeros((cap, 0), dtype=np.int64)
        # The node's NVIDIA driver as a `cuda.driver_code`, for the CUDA filter; UNKNOWN when not reported.
        self.driver = np.full(cap, cuda.UNKNOWN, dtype=np.int64)

    def _grow_rows(self) -> None:
        new_cap = self._cap * 2

        def grow(arr: npt.NDArray[Any], fill: object) -> npt.NDArray[Any]:
            out = np.full((new_cap, *arr.shape[1:]), fill, dtype=arr.dtype)
            out[: self._cap] = arr
            return out

        fills = {"model": -1, "nvlink": -1, "replicas": 1, "driver": cuda.UNKNOWN}
        for name in _ROW_ARRAYS:
            setattr(self, name, grow(getattr(self, name), fills.get(name, 0)))
        domain = np.full((len(self.levels), new_cap), -1, dtype=np.int64)
        domain[:, : self._cap] = self.domain
        self.domain = domain
        self._cap = new_cap

    def _grow_gpus(self, gpus: int) -> None:
        new_g = max(gpus, self.max_gpus * 2)
        for name, fill in (("gpu_free", 0), ("gpu_ok", False), ("gpu_pods", 0), ("nvlink", -1)):
            arr = getattr(self, name)
            out = np.full((self._cap, new_g), fill, dtype=arr.dtype)
            out[:, : self.max_gpus] = arr
            setattr(self, name, out)
        self.max_gpus = new_g

    def _mig_profile_id(self, name: str) -> int:
        found = self._mig_profile_index.get(name)
        if found is None:
            found = len(self.mig_profiles)
            self.mig_profiles.append(name)
            self._mig_profile_index[name] = found
            extra = np.zeros((self._cap, 1), dtype=np.int64)
            self.mig_free = np.concatenate([self.mig_free, extra], axis=1)
        return found

    def mig_profile_column(self, name: str) -> int | None:
        """The column of `mig_free` counting free instances of this profile, if any node has one."""
        return self._mig_profile_index.get(name)

    def model_id(self, gpu_model: str) -> int:
        """The integer code of a GPU model in `self.model` (-1 when no node has it)."""
        return self._model_index.get(gpu_model, -1)

    # ------------------------------------------------------------------ nodes
    def add_node(self, spec: NodeSpec) -> int:
        """Adds a node and returns its row. An invalid spec raises a GpuFleetError and adds nothing."""
        if spec.name in self.index:
            raise ConflictError("a node of this name already exists", obj=f"node {spec.name}")
        driver = _validate_spec(spec)
        layouts = self._plan_mig(spec) if spec.sharing is SharingMode.MIG else {}
        if self.n_rows == self._cap:
            self._grow_rows()
        if spec.gpus > self.max_gpus:
            self._grow_gpus(spec.gpus)
        row = self.n_rows
        self.n_rows += 1
        self.generation += 1
        self.names.append(spec.name)
        self.specs.append(spec)
        self.taints.append(spec.taints)
        self.index[spec.name] = row
        self.node_pods.append(set())
        self._mig.append(layouts)

        self.alive[row] = True
        self.schedulable[row] = not spec.unschedulable
        self.tainted[row] = bool(spec.taints)
        self.cpu_cap[row] = self.cpu_free[row] = spec.cpu_milli
        self.mem_cap[row] = self.mem_free[row] = spec.memory_mib
        self.gpu_count[row] = spec.gpus
        if spec.gpu_model:
            if spec.gpu_model not in self._model_index:
                self._model_index[spec.gpu_model] = len(self.models)
                self.models.append(spec.gpu_model)
            self.model[row] = self._model_index[spec.gpu_model]
        self.mode[row] = MODE_CODES[spec.sharing]
        self.replicas[row] = max(spec.replicas, 1)
        self.driver[row] = cuda.UNKNOWN if driver is None else cuda.driver_code(driver)
        self.gpu_ok[row, : spec.gpus] = True
        for gpu in spec.unhealthy_gpus:
            self.gpu_ok[row, gpu] = False
        for group_id, group in enumerate(spec.nvlink_groups()):
            for gpu in group:
                self.nvlink[row, gpu] = group_id
        if spec.sharing is SharingMode.MIG:
            for gpu, instances in layouts.items():
                if self.gpu_ok[row, gpu]:
                    for inst in instances:
                        column = self._mig_profile_id(inst.profile)  # may widen mig_free: look it up after
                        self.mig_free[row, column] += 1
        else:
            self.gpu_free[row, : spec.gpus] = GPU_MILLI
        for level_no, level in enumerate(self.levels):
            self.domain[level_no, row] = self._domain_of(level_no, level, spec)
        self._refresh_whole_free(row)
        return row

    def _domain_of(self, level_no: int, level: str, spec: NodeSpec) -> int:
        # A domain is named by the whole path down to its level, so rack r1 of block b1 and rack r1 of
        # block b2 are different racks. A node without the label belongs to no domain of that level.
        path = []
        for upper in self.levels[: level_no + 1]:
            value = spec.labels.get(upper)
            if value is None:
                if upper == level:
                    return -1
                value = ""
            path.append(value)
        key = tuple(path)
        index = self._domain_index[level_no]
        found = index.get(key)
        if found is None:
            found = len(self.domain_keys[level_no])
            index[key] = found
            self.domain_keys[level_no].append(key)
            totals = self.domain_whole_free[level_no]
            if found >= totals.size:
                grown = np.zeros(totals.size * 2, dtype=np.int64)
                grown[: totals.size] = totals
                self.domain_whole_free[level_no] = grown
        return found

    @staticmethod
    def _plan_mig(spec: NodeSpec) -> dict[int, list[_MigInstance]]:
        layouts: dict[int, list[_MigInstance]] = {}
        for gpu in range(spec.gpus):
            names = spec.mig_layouts.get(gpu, ())
            placements = mig.plan_layout(spec.gpu_model, names, field=f"node {spec.name}: migLayouts[{gpu}]")
            layouts[gpu] = [_MigInstance(p.profile, p.start) for p in placements]
        return layouts

    def mig_instances(self, row: int) -> dict[int, list[tuple[str, int, str | None]]]:
        """The MIG layout of a node: per GPU, (profile, start slice, holding pod or None)."""
        return {gpu: [(i.profile, i.start, i.holder) for i in insts] for gpu, insts in self._mig[row].items()}

    def mig_gpus_with(self, row: int, profile: str) -> list[int]:
        """Healthy GPUs of a MIG node holding a free instance of `profile`, in GPU order."""
        return [
            gpu
            for gpu, insts in sorted(self._mig[row].items())
            if self.gpu_ok[row, gpu] and any(i.profile == profile and i.holder is None for i in insts)
        ]

    def row_of(self, name: str) -> int:
        """The row of a node that exists now; NotFoundError otherwise."""
        row = self.index.get(name)
        if row is None:
            raise NotFoundError("no such node in the fleet", obj=f"node {name}")
        return row

    def remove_node(self, name: str) -> list[str]:
        """Removes a node; returns the pods that were on it (their allocations are released)."""
        row = self.row_of(name)
        evicted = sorted(self.node_pods[row])
        for pod in evicted:
            self.release(pod)
        del self.index[name]
        self._set_whole_free(row, 0)
        self.free_milli[row] = self.share_free[row] = 0
        self.alive[row] = False
        self.schedulable[row] = False
        self.cpu_free[row] = self.mem_free[row] = 0
        self.gpu_free[row] = 0
        self.gpu_ok[row] = False
        self.mig_free[row] = 0
        self.generation += 1
        return evicted

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        """Cordon (False) or uncordon (True) a node; running pods stay."""
        self.schedulable[self.row_of(name)] = schedulable
        self.generation += 1

    def set_node_devices(self, name: str, devices: NodeDevices | None) -> None:
        """The pools a node's ResourceSlices publish (None: none); a change moves the generation, as what
        a node offers changed (parked workloads look again)."""
        devices = devices if devices is not None and devices.pools else None
        if self.devices.nodes.get(name) != devices:
            self.devices.set_node(name, devices)
            self.generation += 1

    def set_taints(self, name: str, taints: Sequence[Taint]) -> None:
        """Replaces a node's taints; running pods stay (NoExecute eviction is the caller's decision)."""
        row = self.row_of(name)
        self.taints[row] = tuple(taints)
        self.tainted[row] = bool(taints)
        self.generation += 1

    def set_gpu_health(self, name: str, gpu: int, healthy: bool) -> list[str]:
        """Marks one GPU healthy or not; returns the pods that hold it (the caller decides their fate)."""
        row = self.row_of(name)
        if not 0 <= gpu < self.gpu_count[row]:
            raise NotFoundError(f"the node has no GPU {gpu}", obj=f"node {name}", field="gpu")
        was = bool(self.gpu_ok[row, gpu])
        self.gpu_ok[row, gpu] = healthy
        self.touched.add(row)
        if was != healthy:
            self.health_changes += 1
            if self.mode[row] == MIG_CODE:
                for inst in self._mig[row].get(gpu, []):
                    if inst.holder is None:
                        column = self._mig_profile_id(inst.profile)
                        self.mig_free[row, column] += 1 if healthy else -1
        self._refresh_whole_free(row)
        return sorted(pod for pod in self.node_pods[row] if _holds_gpu(self.allocations[pod], gpu))

    # ---------------------------------------------------------- aggregates
    def _refresh_whole_free(self, row: int) -> None:
        """Recounts a node's GPU totals (free whole GPUs, free milli) after its GPUs changed."""
        count = 0
        self.share_free[row] = self.free_milli[row] = 0
        if self.alive[row]:
            # A row is a node's few GPUs: Python lists sum and count them faster than numpy calls do.
            usable = [
                free if ok else 0
                for free, ok in zip(self.gpu_free[row].tolist(), self.gpu_ok[row].tolist(), strict=True)
            ]
            self.free_milli[row] = sum(usable)
            self.share_free[row] = self._share_room(row, usable)
            if WHOLE_MODES[self.mode[row]]:
                count = usable.count(GPU_MILLI)
        self._set_whole_free(row, count)

    def _share_room(self, row: int, usable: list[int]) -> int:
        """The most free milli on one usable GPU that can take one more share pod (0: none)."""
        mode = self.mode[row]
        if not SHARE_MODES[mode]:
            return 0
        if mode != DYNAMIC_CODE:
            limit = int(self.replicas[row])
            usable = [
                free if pods < limit else 0
                for free, pods in zip(usable, self.gpu_pods[row].tolist(), strict=True)
            ]
        return max(usable, default=0)

    def _set_whole_free(self, row: int, count: int) -> None:
        delta = count - int(self.whole_free[row])
        if not delta:
            return
        self.whole_free[row] = count
        for level_no in range(len(self.levels)):
            dom = self.domain[level_no, row]
            if dom >= 0:
                self.domain_whole_free[level_no][dom] += delta

    def usable_gpu_free(self, rows: npt.NDArray[np.intp] | slice | None = None) -> IntArray:
        """Free milli per GPU counting only healthy GPUs, for the given rows (all rows when None)."""
        sel = slice(0, self.n_rows) if rows is None else rows
        return np.where(self.gpu_ok[sel], self.gpu_free[sel], 0)

    # ------------------------------------------------------------ placement
    def allocate(
        self,
        pod: str,
        row: int,
        request: PodRequest,
        gpus: Sequence[int] = (),
        *,
        mig_gpu: int | None = None,
        devices: Sequence[DeviceId] = (),
        shared: Sequence[ClaimAllocation] = (),
    ) -> Allocation:
        """Records that `pod` holds `request` on node `row`, on the given GPUs (and DRA `devices`, and
        the `shared` claims it uses).

        For a MIG request the instance is chosen here (the first free one of that profile, on `mig_gpu`
        when given). Raises AllocationError, changing nothing, if anything would be over-committed.
        """
        self._check_pod_and_node(pod, row, request.cpu_milli, request.memory_mib)
        name = self.names[row]
        kind = request.kind
        mode = int(self.mode[row])
        slot: MigSlot | None = None
        milli = 0
        chosen = tuple(gpus)
        if kind is GpuKind.WHOLE:
            if not WHOLE_MODES[mode]:
                raise AllocationError(f"pod {pod}: node {name} does not hand out whole GPUs")
            if len(chosen) != request.gpus or len(set(chosen)) != len(chosen):
                raise AllocationError(f"pod {pod}: needs {request.gpus} distinct GPUs, got {chosen}")
            for gpu in chosen:
                self._check_gpu(pod, row, gpu, GPU_MILLI)
            milli = GPU_MILLI
        elif kind is GpuKind.SHARE:
            if not SHARE_MODES[mode]:
                raise AllocationError(f"pod {pod}: node {name} does not share GPUs")
            if len(chosen) != 1:
                raise AllocationError(f"pod {pod}: a GPU share takes exactly one GPU, got {chosen}")
            self._check_gpu(pod, row, chosen[0], request.gpu_milli)
            if mode != DYNAMIC_CODE and self.gpu_pods[row, chosen[0]] >= self.replicas[row]:
                raise AllocationError(f"pod {pod}: GPU {chosen[0]} of {name} has no replica left")
            milli = request.gpu_milli
        elif kind is GpuKind.MIG:
            assert request.mig is not None
            if chosen:
                raise AllocationError(f"pod {pod}: a MIG instance is chosen by profile, not by GPU list")
            # No fixed layout: the instance is the partition the pod's claim holds (in `devices`).
            if devices and mode != MIG_CODE:
                slot = dynmig.create(self, pod, row, request.mig, devices)
            else:
                slot = self._take_mig(pod, row, request.mig, mig_gpu)
        elif chosen:
            raise AllocationError(f"pod {pod}: asks for no GPU but was given {chosen}")
        cpu, memory = request.cpu_milli, request.memory_mib
        alloc = Allocation(pod, row, chosen, milli, cpu, memory, slot, tuple(devices), tuple(shared))
        self._record(alloc)
        return alloc

    def reinstate(self, alloc: Allocation) -> Allocation:
        """Puts back exactly an allocation that was released (the undo of `release`).

        Health is not checked: a pod may keep holding a GPU that failed under it, and undoing its
        release must restore that. Capacity still is, so undo can never over-commit.
        """
        self._check_pod_and_node(alloc.pod, alloc.node, alloc.cpu_milli, alloc.memory_mib)
        row = alloc.node
        for gpu in alloc.gpus:
            if not 0 <= gpu < self.gpu_count[row] or self.gpu_free[row, gpu] < alloc.milli:
                raise AllocationError(f"pod {alloc.pod}: GPU {gpu} of {self.names[row]} is taken")
        if alloc.mig is not None and self.mode[row] != MIG_CODE:
            dynmig.create(self, alloc.pod, row, alloc.mig.profile, alloc.devices, alloc.mig)
        elif alloc.mig is not None:
            inst = self._mig_instance(row, alloc.mig)
            if inst is None or inst.holder is not None:
                raise AllocationError(f"pod {alloc.pod}: MIG slot {alloc.mig} is taken or absent")
            inst.holder = alloc.pod
            if self.gpu_ok[row, alloc.mig.gpu]:
                self.mig_free[row, self._mig_profile_index[inst.profile]] -= 1
        self._record(alloc)
        return alloc

    def _check_pod_and_node(self, pod: str, row: int, cpu: int, memory: int) -> None:
        if pod in self.allocations:
            raise AllocationError(f"pod {pod} is already allocated")
        if not (0 <= row < self.n_rows) or not self.alive[row]:
            raise AllocationError(f"node row {row} does not exist")
        if cpu > self.cpu_free[row] or memory > self.mem_free[row]:
            raise AllocationError(f"pod {pod}: not enough cpu or memory on {self.names[row]}")

    def _record(self, alloc: Allocation) -> None:
        row = alloc.node
        if alloc.devices or alloc.shared:
            self.devices.take(alloc)
        for gpu in alloc.gpus:
            self.gpu_free[row, gpu] -= alloc.milli
            self.gpu_pods[row, gpu] += 1
        self.cpu_free[row] -= alloc.cpu_milli
        self.mem_free[row] -= alloc.memory_mib
        self.allocations[alloc.pod] = alloc
        self.node_pods[row].add(alloc.pod)
        self.touched.add(row)
        if alloc.gpus:
            self._refresh_whole_free(row)

    def _check_gpu(self, pod: str, row: int, gpu: int, milli: int) -> None:
        if not (0 <= gpu < self.gpu_count[row]):
            raise AllocationError(f"pod {pod}: node {self.names[row]} has no GPU {gpu}")
        if not self.gpu_ok[row, gpu]:
            raise AllocationError(f"pod {pod}: GPU {gpu} of {self.names[row]} is unhealthy")
        if self.gpu_free[row, gpu] < milli:
            raise AllocationError(f"pod {pod}: GPU {gpu} of {self.names[row]} has too little free")

    def _take_mig(self, pod: str, row: int, profile: str, gpu: int | None) -> MigSlot:
        column = self._mig_profile_index.get(profile)
        if column is None or self.mig_free[row, column] <= 0:
            raise AllocationError(f"pod {pod}: no free {profile} instance on {self.names[row]}")
        for gpu_index, instances in sorted(self._mig[row].items()):
            if (gpu is not None and gpu_index != gpu) or not self.gpu_ok[row, gpu_index]:
                continue
            for inst in instances:
                if inst.profile == profile and inst.holder is None:
                    inst.holder = pod
                    self.mig_free[row, column] -= 1
                    return MigSlot(gpu_index, profile, inst.start)
        raise AllocationError(f"pod {pod}: no free {profile} instance on the requested GPU")

    def _mig_instance(self, row: int, slot: MigSlot) -> _MigInstance | None:
        for inst in self._mig[row].get(slot.gpu, []):
            if inst.profile == slot.profile and inst.start == slot.start:
                return inst
        return None

    def release(self, pod: str) -> Allocation:
        """Frees everything `pod` holds and returns what it held."""
        alloc = self.allocations.get(pod)
        if alloc is None:
            raise AllocationError(f"pod {pod} holds nothing")
        del self.allocations[pod]
        row = alloc.node
        self.touched.add(row)
        if alloc.devices or alloc.shared:
            self.devices.give_back(alloc)
        self.node_pods[row].discard(pod)
        self.cpu_free[row] += alloc.cpu_milli
        self.mem_free[row] += alloc.memory_mib
        for gpu in alloc.gpus:
            self.gpu_free[row, gpu] += alloc.milli
            self.gpu_pods[row, gpu] -= 1
        if alloc.mig is not None and self.mode[row] != MIG_CODE:
            dynmig.remove(self, pod, row, alloc.mig)
        elif alloc.mig is not None:
            inst = self._mig_instance(row, alloc.mig)
            assert inst is not None and inst.holder == pod
            inst.holder = None
            if self.gpu_ok[row, alloc.mig.gpu]:
                self.mig_free[row, self._mig_profile_index[inst.profile]] += 1
        if alloc.gpus:
            self._refresh_whole_free(row)
        return alloc

    # -------------------------------------------------------------- queries
    def rows(self) -> Iterator[int]:
        """Rows of the nodes that exist now."""
        return (row for row in range(self.n_rows) if self.alive[row])

    def pods_on(self, name: str) -> list[str]:
        return sorted(self.node_pods[self.row_of(name)])

    def level_number(self, level: str) -> int | None:
        """The index of a labelled topology level, or None when the fleet does not declare it."""
        return self.levels.index(level) if level in self.levels else None

    def free_whole_gpus_in(self, level: str) -> IntArray:
        """Free whole GPUs per domain of a topology level."""
        level_no = self.levels.index(level)
        return self.domain_whole_free[level_no][: len(self.domain_keys[level_no])]

    def domain_name(self, level_no: int, domain: int) -> str:
        """A domain's readable name: its label values from the top level down, joined by '/'."""
        return "/".join(v for v in self.domain_keys[level_no][domain] if v)

    def domain_members(self, level_no: int) -> tuple[RowArray, IntArray]:
        """Live rows grouped by domain of a level: rows `order[bounds[d]:bounds[d + 1]]` form domain d.

        Built once per fleet generation (nodes added, removed, cordoned), not per decision.
        """
        cached = self._members.get(level_no)
        if cached is not None and cached[0] == self.generation:
            return cached[1], cached[2]
        n = self.n_rows
        doms = self.domain[level_no, :n]
        live = np.flatnonzero(self.alive[:n] & (doms >= 0))
        order = live[np.argsort(doms[live], kind="stable")]
        counts = np.bincount(doms[live], minlength=len(self.domain_keys[level_no]))
        bounds = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=bounds[1:])
        self._members[level_no] = (self.generation, order, bounds)
        return order, bounds

    def copy(self) -> FleetState:
        """An independent copy: changes to either side never show in the other."""
        clone = _copy.copy(self)
        for name in (*_ROW_ARRAYS, "domain"):
            setattr(clone, name, getattr(self, name).copy())
        clone.domain_whole_free = [totals.copy() for totals in self.domain_whole_free]
        clone.names = list(self.names)
        clone.specs = list(self.specs)
        clone.taints = list(self.taints)
        clone.index = dict(self.index)
        clone.models = list(self.models)
        clone._model_index = dict(self._model_index)
        clone.allocations = dict(self.allocations)
        clone.node_pods = [set(pods) for pods in self.node_pods]
        clone._mig = [
            {
                gpu: [_MigInstance(i.profile, i.start, i.holder, i.size) for i in insts]
                for gpu, insts in layout.items()
            }
            for layout in self._mig
        ]
        clone.mig_profiles = list(self.mig_profiles)
        clone._mig_profile_index = dict(self._mig_profile_index)
        clone.domain_keys = [list(keys) for keys in self.domain_keys]
        clone._domain_index = [dict(index) for index in self._domain_index]
        clone._members = {}
        clone.devices = self.devices.copy()
        clone.touched = TouchedRows()
        return clone

    def check_invariants(self) -> None:
        """Recomputes every aggregate from the allocations and raises AssertionError on any mismatch.

        Checked: nothing is held twice (a whole GPU by two pods, a GPU both whole and shared, a MIG
        instance by two pods, a DRA device by two pods), nothing beyond capacity (milli, replicas, CPU,
        memory), and every kept total (free milli, free whole GPUs per node and per domain, free MIG
        instances, devices in use) equals a recount.
        """
        self.devices.check(self.allocations.values())
        n = self.n_rows
        gpu_used = np.zeros((n, self.max_gpus), dtype=np.int64)
        gpu_pods = np.zeros((n, self.max_gpus), dtype=np.int64)
        whole_holders = np.zeros((n, self.max_gpus), dtype=np.int64)
        cpu_used = np.zeros(n, dtype=np.int64)
        mem_used = np.zeros(n, dtype=np.int64)
        for pod, alloc in self.allocations.items():
            row = alloc.node
            assert alloc.pod == pod
            assert self.alive[row], f"{pod} is on a removed node"
            assert pod in self.node_pods[row]
            assert len(set(alloc.gpus)) == len(alloc.gpus), f"{pod} lists a GPU twice"
            cpu_used[row] += alloc.cpu_milli
            mem_used[row] += alloc.memory_mib
            for gpu in alloc.gpus:
                assert 0 <= gpu < self.gpu_count[row], f"{pod} holds a GPU the node lacks"
                gpu_used[row, gpu] += alloc.milli
                gpu_pods[row, gpu] += 1
                whole_holders[row, gpu] += alloc.milli == GPU_MILLI
        assert sum(len(pods) for pods in self.node_pods) == len(self.allocations)
        alive = self.alive[:n]
        assert np.array_equal(self.cpu_free[:n][alive], (self.cpu_cap[:n] - cpu_used)[alive])
        assert np.array_equal(self.mem_free[:n][alive], (self.mem_cap[:n] - mem_used)[alive])
        assert (self.cpu_free[:n] >= 0).all() and (self.mem_free[:n] >= 0).all()
        assert (self.gpu_free[:n] >= 0).all(), "a GPU is over-committed"
        assert np.array_equal(self.gpu_pods[:n][alive], gpu_pods[alive])
        exclusive_and_shared = (whole_holders > 0) & (gpu_pods > whole_holders)
        assert not (whole_holders > 1).any(), "a whole GPU is held by two pods"
        assert not exclusive_and_shared.any(), "a GPU is held whole and shared at once"
        for row in range(n):
            if not alive[row]:
                continue
            if self.mode[row] == MIG_CODE:
                dynmig.check_layout_row(self, row)
                continue
            dynmig.check_dynamic_row(self, row)
            expected = np.zeros(self.max_gpus, dtype=np.int64)
            expected[: self.gpu_count[row]] = GPU_MILLI
            expected -= gpu_used[row] + dynmig.partitioned(self, row)
            assert np.array_equal(self.gpu_free[row], expected), f"row {row} gpu_free drift"
            if self.mode[row] not in (DYNAMIC_CODE, MIG_CODE) and not WHOLE_MODES[self.mode[row]]:
                assert (self.gpu_pods[row] <= self.replicas[row]).all(), f"row {row} exceeds its replicas"
            whole = 0
            if WHOLE_MODES[self.mode[row]]:
                whole = int(np.count_nonzero((self.gpu_free[row] == GPU_MILLI) & self.gpu_ok[row]))
            assert self.whole_free[row] == whole, f"row {row} whole_free drift"
            usable = int(np.where(self.gpu_ok[row], self.gpu_free[row], 0).sum())
            assert self.free_milli[row] == usable, f"row {row} free_milli drift"
            room = self._share_room(row, np.where(self.gpu_ok[row], self.gpu_free[row], 0).tolist())
            assert self.share_free[row] == room, f"row {row} share_free drift"
        for level_no in range(len(self.levels)):
            totals = np.zeros(len(self.domain_keys[level_no]), dtype=np.int64)
            for row in range(n):
                dom = self.domain[level_no, row]
                if dom >= 0 and alive[row]:
                    totals[dom] += self.whole_free[row]
            assert np.array_equal(totals, self.free_whole_gpus_in(self.levels[level_no]))


def _holds_gpu(alloc: Allocation, gpu: int) -> bool:
    return gpu in alloc.gpus or (alloc.mig is not None and alloc.mig.gpu == gpu)


def _validate_spec(spec: NodeSpec) -> tuple[int, int, int] | None:
    """A NodeSpec comes from user files: every inconsistency names the node and the field.

    Returns the parsed driver version (None when the node reports none)."""
    obj = f"node {spec.name}"
    if not spec.name:
        raise ValidationError("a node needs a name", field="name")
    driver = None
    if spec.driver_version:
        try:
            driver = parse_driver_version(spec.driver_version)
        except ValueError as exc:
            raise ValidationError(str(exc), obj=obj, field="driverVersion") from None
    for field, value in (("gpus", spec.gpus), ("cpu", spec.cpu_milli), ("memory", spec.memory_mib)):
        if value < 0:
            raise ValidationError(f"must not be negative, got {value}", obj=obj, field=field)
    if spec.replicas < 1:
        raise ValidationError(f"must be at least 1, got {spec.replicas}", obj=obj, field="replicas")
    seen: set[int] = set()
    for group in spec.nvlink_groups():
        for gpu in group:
            if not 0 <= gpu < spec.gpus or gpu in seen:
                raise ValidationError(
                    f"GPU {gpu} is out of range or in two domains", obj=obj, field="nvlinkDomains"
                )
            seen.add(gpu)
    for gpu in spec.unhealthy_gpus:
        if not 0 <= gpu < spec.gpus:
            raise ValidationError(f"the node has no GPU {gpu}", obj=obj, field="unhealthyGpus")
    if spec.mig_layouts and spec.sharing is not SharingMode.MIG:
        raise ValidationError("MIG layouts need sharing mode mig", obj=obj, field="sharing")
    if spec.sharing is SharingMode.MIG:
        if not mig.mig_capable(spec.gpu_model):
            raise ValidationError(
                f"GPU model {spec.gpu_model!r} does not support MIG", obj=obj, field="sharing"
            )
        for gpu in spec.mig_layouts:
            if not 0 <= gpu < spec.gpus:
                raise ValidationError(f"the node has no GPU {gpu}", obj=obj, field="migLayouts")
    return driver
