"""Small builders for placement tests: fleets, workloads and a deterministic first-fit policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest, Taint
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.scoring import Scored
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

GiB = 1024


class FirstFit:
    """Lowest row first; proposes no GPUs so the placer's own GPU choice is what a test sees."""

    name = "firstfit"

    def __init__(self) -> None:
        self.observed: list[int] = []

    def score(self, state: FleetState, request: PodRequest, rows: npt.NDArray[np.intp]) -> Scored:
        return Scored(-rows.astype(np.float64), [()] * rows.size)

    def observe(self, state: FleetState, row: int) -> None:
        self.observed.append(row)


def node(
    name: str,
    gpus: int = 8,
    *,
    model: str = "H100-80GB",
    labels: Mapping[str, str] | None = None,
    nvlink: Sequence[Sequence[int]] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
    unhealthy: Sequence[int] = (),
    sharing: SharingMode = SharingMode.DYNAMIC,
    replicas: int = 1,
    mig: Mapping[int, Sequence[str]] | None = None,
    cpu: int = 96_000,
    memory: int = 1024 * GiB,
) -> NodeSpec:
    return NodeSpec(
        name=name,
        gpu_model=model,
        gpus=gpus,
        cpu_milli=cpu,
        memory_mib=memory,
        labels=dict(labels or {}),
        taints=tuple(taints),
        unschedulable=unschedulable,
        nvlink_domains=None if nvlink is None else tuple(tuple(d) for d in nvlink),
        sharing=sharing,
        replicas=replicas,
        mig_layouts={gpu: tuple(names) for gpu, names in (mig or {}).items()},
        unhealthy_gpus=tuple(unhealthy),
    )


def fleet(*specs: NodeSpec, levels: Sequence[str] = (), nvlink_level: str | None = None) -> FleetState:
    state = FleetState(levels, nvlink_level=nvlink_level)
    for spec in specs:
        state.add_node(spec)
    return state


def racks(blocks: int, racks_per_block: int, nodes_per_rack: int, gpus: int = 8) -> FleetState:
    """A block > rack fleet of identical nodes named b{i}-r{j}-n{k}."""
    state = FleetState(("block", "rack"))
    for b in range(blocks):
        for r in range(racks_per_block):
            for k in range(nodes_per_rack):
                state.add_node(node(f"b{b}-r{r}-n{k}", gpus, labels={"block": f"b{b}", "rack": f"r{r}"}))
    return state


def workload(
    name: str,
    *pod_sets: tuple[str, int, PodRequest] | tuple[str, int, PodRequest, int],
    required: str | None = None,
    preferred: str | None = None,
) -> Workload:
    sets = tuple(
        PodSet(ps[0], ps[1], ps[2], ps[3] if len(ps) == 4 else None)  # type: ignore[misc]
        for ps in pod_sets
    )
    return Workload(name, sets, topology=TopologyRequest(required, preferred))


def gpus(n: int, **kw: object) -> PodRequest:
    return PodRequest(gpus=n, **kw)  # type: ignore[arg-type]
