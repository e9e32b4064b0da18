"""The fleet's free capacity, kept in numpy arrays and updated incrementally.

Every array is indexed by a node's row. Rows are never reused while a fleet lives, so a row number is a
stable node handle for the scheduler. Capacity grows by doubling, so adding nodes one at a time stays
amortised O(1). Allocation and release touch only the rows and domains they change: nothing is rebuilt
per decision, which is what lets one cycle over thousands of nodes stay cheap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest, Taint
from gpufleet.sharing import mig

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MODE_CODES = {mode: code for code, mode in enumerate(SharingMode)}
_WHOLE_MODES = np.array(
    [mode in (SharingMode.DYNAMIC, SharingMode.EXCLUSIVE) for mode in SharingMode], dtype=np.bool_
)
_SHARE_MODES = np.array(
    [mode in (SharingMode.DYNAMIC, SharingMode.TIME_SLICING, SharingMode.MPS) for mode in SharingMode],
    dtype=np.bool_,
)


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
    "mig_free",
    "tainted",
)


class AllocationError(RuntimeError):
    """An allocation would break the fleet's invariants: a scheduler bug, never a user error."""


@dataclass(frozen=True, slots=True)
class MigSlot:
    gpu: int
    profile: str
    start: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """Exactly what one pod holds on one node."""

    pod: str
    node: int
    gpus: tuple[int, ...]
    milli: int
    cpu_milli: int
    memory_mib: int
    mig: MigSlot | None = None

    @property
    def gpu_milli_total(self) -> int:
        return self.milli * len(self.gpus)


@dataclass(slots=True)
class _MigInstance:
    profile: str
    start: int
    holder: str | None = None


class FleetState:
    """Nodes, GPUs, topology domains and allocations of one fleet."""

    def __init__(self, topology_levels: Sequence[str] = (), *, max_gpus: int = 8, capacity: int = 64) -> None:
        self.levels: tuple[str, ...] = tuple(topology_levels)
        self._cap = max(capacity, 1)
        self.max_gpus = max(max_gpus, 1)
        self.n_rows = 0
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
        self.domain = np.full((len(self.levels), cap), -1, dtype=np.int64)
        self.domain_whole_free: list[IntArray] = [np.zeros(16, dtype=np.int64) for _ in self.levels]
        self.mig_free = np.zeros((cap, 0), dtype=np.int64)

    def _grow_rows(self) -> None:
        new_cap = self._cap * 2

        def grow(arr: npt.NDArray[Any], fill: object) -> npt.NDArray[Any]:
            out = np.full((new_cap, *arr.shape[1:]), fill, dtype=arr.dtype)
            out[: self._cap] = arr
            return out

        fills = {"model": -1, "nvlink": -1, "replicas": 1}
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
        """Adds a node and returns its row; a duplicate name is an AllocationError."""
        if spec.name in self.index:
            raise AllocationError(f"node {spec.name} already exists")
        if self.n_rows == self._cap:
            self._grow_rows()
        if spec.gpus > self.max_gpus:
            self._grow_gpus(spec.gpus)
        row = self.n_rows
        self.n_rows += 1
        self.names.append(spec.name)
        self.specs.append(spec)
        self.taints.append(spec.taints)
        self.index[spec.name] = row
        self.node_pods.append(set())
        self._mig.append({})

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
        self.gpu_ok[row, : spec.gpus] = True
        for gpu in spec.unhealthy_gpus:
            self.gpu_ok[row, gpu] = False
        for group_id, group in enumerate(spec.nvlink_groups()):
            for gpu in group:
                self.nvlink[row, gpu] = group_id
        if spec.sharing is SharingMode.MIG:
            self._add_mig_layout(row, spec)
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

    def _add_mig_layout(self, row: int, spec: NodeSpec) -> None:
        layouts: dict[int, list[_MigInstance]] = {}
        for gpu in range(spec.gpus):
            names = spec.mig_layouts.get(gpu, ())
            placements = mig.plan_layout(spec.gpu_model, names, field=f"node {spec.name} gpu {gpu}")
            layouts[gpu] = [_MigInstance(p.profile, p.start) for p in placements]
            if self.gpu_ok[row, gpu]:
                for placement in placements:
                    column = self._mig_profile_id(placement.profile)  # may widen mig_free
                    self.mig_free[row, column] += 1
        self._mig[row] = layouts

    def mig_instances(self, row: int) -> dict[int, list[tuple[str, int, str | None]]]:
        """The MIG layout of a node: per GPU, (profile, start slice, holding pod or None)."""
        return {gpu: [(i.profile, i.start, i.holder) for i in insts] for gpu, insts in self._mig[row].items()}

    def remove_node(self, name: str) -> list[str]:
        """Removes a node; returns the pods that were on it (their allocations are released)."""
        row = self.index.pop(name)
        evicted = sorted(self.node_pods[row])
        for pod in evicted:
            self.release(pod)
        self._set_whole_free(row, 0)
        self.alive[row] = False
        self.schedulable[row] = False
        self.cpu_free[row] = self.mem_free[row] = 0
        self.gpu_free[row] = 0
        self.gpu_ok[row] = False
        self.mig_free[row] = 0
        return evicted

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        """Cordon (False) or uncordon (True) a node; running pods stay."""
        self.schedulable[self.index[name]] = schedulable

    def set_gpu_health(self, name: str, gpu: int, healthy: bool) -> list[str]:
        """Marks one GPU healthy or not; returns the pods that hold it (the caller decides their fate)."""
        row = self.index[name]
        if gpu >= self.gpu_count[row]:
            raise AllocationError(f"node {name} has no GPU {gpu}")
        was = bool(self.gpu_ok[row, gpu])
        self.gpu_ok[row, gpu] = healthy
        if was != healthy and self.mode[row] == MODE_CODES[SharingMode.MIG]:
            for inst in self._mig[row].get(gpu, []):
                if inst.holder is None:
                    column = self._mig_profile_id(inst.profile)
                    self.mig_free[row, column] += 1 if healthy else -1
        self._refresh_whole_free(row)
        return sorted(
            pod
            for pod in self.node_pods[row]
            if gpu in self.allocations[pod].gpus
            or (self.allocations[pod].mig is not None and self.allocations[pod].mig.gpu == gpu)  # type: ignore[union-attr]
        )

    # ---------------------------------------------------------- aggregates
    def _refresh_whole_free(self, row: int) -> None:
        count = 0
        if self.alive[row] and _WHOLE_MODES[self.mode[row]]:
            count = int(np.count_nonzero((self.gpu_free[row] == GPU_MILLI) & self.gpu_ok[row]))
        self._set_whole_free(row, count)

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
    ) -> Allocation:
        """Records that `pod` holds `request` on node `row`, on the given GPUs.

        For a MIG request the instance is chosen here (the first free one of that profile, on `mig_gpu`
        when given). Raises AllocationError, changing nothing, if anything would be over-committed.
        """
        if pod in self.allocations:
            raise AllocationError(f"pod {pod} is already allocated")
        if not (0 <= row < self.n_rows) or not self.alive[row]:
            raise AllocationError(f"node row {row} does not exist")
        name = self.names[row]
        if request.cpu_milli > self.cpu_free[row] or request.memory_mib > self.mem_free[row]:
            raise AllocationError(f"pod {pod}: not enough cpu or memory on {name}")
        kind = request.kind
        mode = int(self.mode[row])
        slot: MigSlot | None = None
        milli = 0
        chosen = tuple(gpus)
        if kind is GpuKind.WHOLE:
            if not _WHOLE_MODES[mode]:
                raise AllocationError(f"pod {pod}: node {name} does not hand out whole GPUs")
            if len(chosen) != request.gpus or len(set(chosen)) != len(chosen):
                raise AllocationError(f"pod {pod}: needs {request.gpus} distinct GPUs, got {chosen}")
            for gpu in chosen:
                self._check_gpu(pod, row, gpu, GPU_MILLI)
            milli = GPU_MILLI
        elif kind is GpuKind.SHARE:
            if not _SHARE_MODES[mode]:
                raise AllocationError(f"pod {pod}: node {name} does not share GPUs")
            if len(chosen) != 1:
                raise AllocationError(f"pod {pod}: a GPU share takes exactly one GPU, got {chosen}")
            self._check_gpu(pod, row, chosen[0], request.gpu_milli)
            if (
                mode != MODE_CODES[SharingMode.DYNAMIC]
                and self.gpu_pods[row, chosen[0]] >= self.replicas[row]
            ):
                raise AllocationError(f"pod {pod}: GPU {chosen[0]} of {name} has no replica left")
            milli = request.gpu_milli
        elif kind is GpuKind.MIG:
            assert request.mig is not None
            slot = self._take_mig(pod, row, request.mig, mig_gpu)
            chosen = ()
        elif chosen:
            raise AllocationError(f"pod {pod}: asks for no GPU but was given {chosen}")

        for gpu in chosen:
            self.gpu_free[row, gpu] -= milli
            self.gpu_pods[row, gpu] += 1
        self.cpu_free[row] -= request.cpu_milli
        self.mem_free[row] -= request.memory_mib
        alloc = Allocation(pod, row, chosen, milli, request.cpu_milli, request.memory_mib, slot)
        self.allocations[pod] = alloc
        self.node_pods[row].add(pod)
        if chosen:
            self._refresh_whole_free(row)
        return alloc

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

    def release(self, pod: str) -> Allocation:
        """Frees everything `pod` holds and returns what it held."""
        alloc = self.allocations.pop(pod)
        row = alloc.node
        self.node_pods[row].discard(pod)
        self.cpu_free[row] += alloc.cpu_milli
        self.mem_free[row] += alloc.memory_mib
        for gpu in alloc.gpus:
            self.gpu_free[row, gpu] += alloc.milli
            self.gpu_pods[row, gpu] -= 1
        if alloc.mig is not None:
            for inst in self._mig[row][alloc.mig.gpu]:
                if inst.holder == pod:
                    inst.holder = None
                    if self.gpu_ok[row, alloc.mig.gpu]:
                        column = self._mig_profile_id(inst.profile)
                        self.mig_free[row, column] += 1
                    break
        if alloc.gpus:
            self._refresh_whole_free(row)
        return alloc

    # -------------------------------------------------------------- queries
    def rows(self) -> Iterator[int]:
        """Rows of the nodes that exist now."""
        return (row for row in range(self.n_rows) if self.alive[row])

    def pods_on(self, name: str) -> list[str]:
        return sorted(self.node_pods[self.index[name]])

    def free_whole_gpus_in(self, level: str) -> IntArray:
        """Free whole GPUs per domain of a topology level."""
        level_no = self.levels.index(level)
        return self.domain_whole_free[level_no][: len(self.domain_keys[level_no])]

    def check_invariants(self) -> None:
        """Recomputes every aggregate from the allocations and raises AssertionError on any mismatch."""
        n = self.n_rows
        gpu_used = np.zeros((n, self.max_gpus), dtype=np.int64)
        gpu_pods = np.zeros((n, self.max_gpus), dtype=np.int64)
        cpu_used = np.zeros(n, dtype=np.int64)
        mem_used = np.zeros(n, dtype=np.int64)
        for pod, alloc in self.allocations.items():
            assert self.alive[alloc.node], f"{pod} is on a removed node"
            assert pod in self.node_pods[alloc.node]
            cpu_used[alloc.node] += alloc.cpu_milli
            mem_used[alloc.node] += alloc.memory_mib
            for gpu in alloc.gpus:
                gpu_used[alloc.node, gpu] += alloc.milli
                gpu_pods[alloc.node, gpu] += 1
        alive = self.alive[:n]
        assert np.array_equal(self.cpu_free[:n][alive], (self.cpu_cap[:n] - cpu_used)[alive])
        assert np.array_equal(self.mem_free[:n][alive], (self.mem_cap[:n] - mem_used)[alive])
        assert (self.cpu_free[:n] >= 0).all() and (self.mem_free[:n] >= 0).all()
        assert (self.gpu_free[:n] >= 0).all(), "a GPU is over-committed"
        assert np.array_equal(self.gpu_pods[:n][alive], gpu_pods[alive])
        for row in range(n):
            if not alive[row]:
                continue
            if self.mode[row] == MODE_CODES[SharingMode.MIG]:
                holders = [i.holder for insts in self._mig[row].values() for i in insts if i.holder]
                assert len(holders) == len(set(holders)), "a MIG instance is held twice"
                for inst_pod in holders:
                    held = self.allocations[inst_pod].mig
                    assert held is not None
                continue
            expected = np.zeros(self.max_gpus, dtype=np.int64)
            expected[: self.gpu_count[row]] = GPU_MILLI
            assert np.array_equal(self.gpu_free[row], expected - gpu_used[row]), f"row {row} gpu_free drift"
            for gpu in range(int(self.gpu_count[row])):
                holders = [p for p in self.node_pods[row] if gpu in self.allocations[p].gpus]
                whole = [p for p in holders if self.allocations[p].milli == GPU_MILLI]
                assert not whole or len(holders) == 1, f"GPU {gpu} of row {row} is exclusive and shared"
        for level_no in range(len(self.levels)):
            totals = np.zeros(len(self.domain_keys[level_no]), dtype=np.int64)
            for row in range(n):
                dom = self.domain[level_no, row]
                if dom >= 0 and alive[row]:
                    totals[dom] += self.whole_free[row]
            assert np.array_equal(totals, self.free_whole_gpus_in(self.levels[level_no]))
