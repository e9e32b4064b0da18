"""A worker cluster's capacity in a few numbers: what the manager dispatches on instead of every node.

A federation of 10 clusters of 2,000 nodes must not ship 20,000 nodes to the manager on every heartbeat,
nor run placement over them. Per GPU model a summary keeps the totals (GPUs, free whole GPUs, free
shares, free MIG instances) and, per topology level, a histogram of its domains by free whole GPUs
(`{8: 1500, 3: 20}`: 1,500 hosts with 8 free, 20 with 3). The histogram is what answers "does a gang of
4 pods x 8 GPUs fit inside one rack now" and lets the dispatcher take what it dispatched out of the
summary until the next heartbeat, without knowing the nodes.

Levels are the built-in `nvlink` and `host` and the worker's labelled levels (rack, block...). A summary
is a necessary condition, not a placement: the worker's own scheduler places the pods and may still
find the free GPUs too scattered; then the workload waits there, or comes back to be dispatched again.

Beside what is free now, a summary says what could ever fit on one host of the model: the largest
allocatable CPU and memory of one host, and the taints every host carries. A pod asking more than that,
or not tolerating such a taint, fits nowhere in the cluster however long it waits there. It also groups
the hosts by their labels (`federation.hostlabels`), so a pod's node selector is matched against them.

Pure: no I/O, no clock; `summarize` reads a FleetState and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpufleet.federation.hostlabels import HostLabels, host_labels
from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.request import GPU_MILLI, SCHEDULING_EFFECTS, Taint
from gpufleet.fleet.state import HOST_LEVEL, MODE_CODES, NVLINK_LEVEL, SHARE_MODES, WHOLE_MODES, FleetState

Histogram = dict[int, int]
"""Free whole GPUs in one domain -> how many domains have exactly that many (empty domains left out)."""

_MODE_NAMES = {code: mode.value for mode, code in MODE_CODES.items()}


@dataclass(slots=True)
class ModeSummary:
    """GPUs of one model in one sharing mode (`exclusive`, `dynamic`, `timeSlicing`, `mps`, `mig`)."""

    gpus: int = 0
    free_gpus: int = 0
    free_gpu_milli: int = 0
    free_mig: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class ModelSummary:
    """What a cluster has free of one GPU model. Mutable: the dispatcher takes from it what it sends."""

    gpus: int = 0
    free_gpus: int = 0
    free_share_milli: int = 0
    """Free milli-GPU on GPUs that take share pods (time-slicing, MPS, dynamic)."""
    free_mig: dict[str, int] = field(default_factory=dict)
    free_domains: dict[str, Histogram] = field(default_factory=dict)
    """Per level (nvlink, host, rack...), domains by free whole GPUs."""
    by_mode: dict[str, ModeSummary] = field(default_factory=dict)
    host_cpu_milli: int | None = None
    """The most allocatable CPU of one host of the model; None: not reported (an older worker), which the
    dispatcher takes as enough for any pod."""
    host_memory_mib: int | None = None
    """The most allocatable memory of one host of the model; None as for CPU."""
    taints: tuple[Taint, ...] = ()
    """The NoSchedule and NoExecute taints every host of the model carries (none when one host has none):
    a pod that does not tolerate one of them fits no host of the model."""
    host_labels: HostLabels | None = None
    """The hosts grouped by label, for node selectors and required node affinity (`federation.hostlabels`);
    None: not reported (an older worker), which the dispatcher takes as any host matching."""

    def largest_free(self, level: str) -> int:
        """The most free whole GPUs in one domain of `level`; 0 when the level is unknown or full."""
        histogram = self.free_domains.get(level)
        return max(histogram) if histogram else 0

    def copy(self) -> ModelSummary:
        return ModelSummary(
            gpus=self.gpus,
            free_gpus=self.free_gpus,
            free_share_milli=self.free_share_milli,
            free_mig=dict(self.free_mig),
            free_domains={level: dict(h) for level, h in self.free_domains.items()},
            by_mode={
                mode: ModeSummary(m.gpus, m.free_gpus, m.free_gpu_milli, dict(m.free_mig))
                for mode, m in self.by_mode.items()
            },
            host_cpu_milli=self.host_cpu_milli,
            host_memory_mib=self.host_memory_mib,
            taints=self.taints,
            host_labels=None if self.host_labels is None else self.host_labels.copy(),
        )


def _histogram(values: np.ndarray) -> Histogram:
    counts = np.bincount(values[values > 0])
    return {int(free): int(n) for free, n in enumerate(counts) if n}


def summarize(fleet: FleetState) -> dict[str, ModelSummary]:
    """Per GPU model, the cluster's capacity and free GPUs from its fleet state: only live, schedulable
    nodes count (a cordoned node takes no new work) and only healthy GPUs."""
    n = fleet.n_rows
    rows_ok = fleet.alive[:n] & fleet.schedulable[:n]
    usable = np.where(fleet.gpu_ok[:n], fleet.gpu_free[:n], 0)
    whole = (usable == GPU_MILLI) & WHOLE_MODES[fleet.mode[:n]][:, None] & fleet.gpu_ok[:n]
    result: dict[str, ModelSummary] = {}
    for model_id, model in enumerate(fleet.models):
        rows = np.flatnonzero(rows_ok & (fleet.model[:n] == model_id))
        if rows.size == 0:
            continue
        summary = ModelSummary()
        summary.gpus = int(fleet.gpu_ok[rows].sum())
        summary.free_gpus = int(fleet.whole_free[rows].sum())
        share_rows = rows[SHARE_MODES[fleet.mode[rows]]]
        summary.free_share_milli = int(fleet.free_milli[share_rows].sum())
        for column, profile in enumerate(fleet.mig_profiles):
            free = int(fleet.mig_free[rows, column].sum())
            if free:
                summary.free_mig[profile] = free
        summary.free_domains = _domains(fleet, rows, whole)
        summary.by_mode = _by_mode(fleet, rows, usable, whole)
        summary.host_cpu_milli = int(fleet.cpu_cap[rows].max())
        summary.host_memory_mib = int(fleet.mem_cap[rows].max())
        summary.taints = _common_taints(fleet, rows)
        summary.host_labels = host_labels(fleet, rows)
        result[model] = summary
    return result


def _common_taints(fleet: FleetState, rows: np.ndarray) -> tuple[Taint, ...]:
    """The scheduling taints on every one of `rows`, in the first row's order."""
    if not fleet.tainted[rows].all():
        return ()
    first = list(dict.fromkeys(t for t in fleet.taints[int(rows[0])] if t.effect in SCHEDULING_EFFECTS))
    common = set(first)
    for row in rows[1:]:
        common.intersection_update(fleet.taints[int(row)])
        if not common:
            return ()
    return tuple(t for t in first if t in common)


def _domains(fleet: FleetState, rows: np.ndarray, whole: np.ndarray) -> dict[str, Histogram]:
    domains: dict[str, Histogram] = {HOST_LEVEL: _histogram(fleet.whole_free[rows])}
    # NVLink domains inside each node: free whole GPUs per (node, group), groups numbered from 0.
    groups = fleet.nvlink[rows]
    free_in_group = [
        ((groups == g) & whole[rows]).sum(axis=1) for g in range(int(groups.max(initial=-1)) + 1)
    ]
    domains[NVLINK_LEVEL] = _histogram(np.concatenate(free_in_group)) if free_in_group else {}
    for level_no, level in enumerate(fleet.levels):
        member = fleet.domain[level_no, rows]
        labelled = member >= 0
        per_domain = np.bincount(member[labelled], weights=fleet.whole_free[rows][labelled])
        domains[level] = _histogram(per_domain.astype(np.int64))
    return domains


def _by_mode(
    fleet: FleetState, rows: np.ndarray, usable: np.ndarray, whole: np.ndarray
) -> dict[str, ModeSummary]:
    found: dict[str, ModeSummary] = {}
    modes = fleet.mode[rows]
    for code in np.unique(modes):
        mode_rows = rows[modes == code]
        name = _MODE_NAMES[int(code)]
        entry = ModeSummary(gpus=int(fleet.gpu_ok[mode_rows].sum()), free_gpus=int(whole[mode_rows].sum()))
        if SHARE_MODES[code]:
            entry.free_gpu_milli = int(usable[mode_rows].sum())
        if name == SharingMode.MIG.value:
            for column, profile in enumerate(fleet.mig_profiles):
                free = int(fleet.mig_free[mode_rows, column].sum())
                if free:
                    entry.free_mig[profile] = free
        found[name] = entry
    return found


@dataclass(slots=True)
class ClusterSummary:
    """One worker cluster as the dispatcher sees it.

    `labels` are the Cluster's labels with its region, zone and network (what a queue's selector
    matches); `prices` per GPU model; `accepting` is False while it is draining, not Ready or past its
    lease: it keeps what runs there but gets nothing new.
    """

    name: str
    models: dict[str, ModelSummary]
    labels: Mapping[str, str] = field(default_factory=dict)
    prices: Mapping[str, float] = field(default_factory=dict)
    accepting: bool = True
    levels: tuple[str, ...] = ()
    """The worker's labelled topology levels, coarse to fine (block, rack); nvlink and host come below."""

    def price(self, model: str | None) -> float:
        return self.prices.get(model, 0.0) if model is not None else 0.0
