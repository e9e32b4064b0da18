"""The placement throughput benchmark: how fast the core places pods and topology-constrained gangs.

A synthetic fleet of HGX nodes (one NVLink domain of `gpus_per_node` GPUs each, `nodes_per_rack` nodes a
rack, `racks_per_block` racks a block) receives three streams, each decision timed on its own:

1. single-GPU pods. Pods leave at random once the single pods hold `pod_occupancy` of the GPUs (a
   steady state of arrivals and departures rather than a fleet that simply fills up);
2. the single pods have finished (all released, untimed); then gangs of 2 to 64 whole-node pods, each
   requiring one rack (when it fits in a rack, half the time) or one block. Gangs leave oldest first
   whenever the next one would push the gangs above `gang_occupancy` of the GPUs;
3. with the gangs still running, GPU-share pods (100 to 500 milli); a random share pod leaves once
   `share_resident` of them run.

The stream lengths scale with the fleet (`ThroughputConfig.for_fleet`): per node 10 single pods, 0.4 gangs,
10 share pods and 6 resident share pods, i.e. 50,000 / 2,000 / 50,000 / 30,000 at 5,000 nodes. A small
fleet thus gets a stream it can hold instead of 50,000 share pods that are mostly rejected, which would
make the share rate a rate of rejections. Each stream reports its rejections beside its rate.

Releases are not timed: they are the world's work, and cheap. Each placement runs through
`place_workload`, the same call the scheduling cycle makes, followed by `learn` for each pod placed, as
the cycle does. The policy is the scheduler's default for each stream's workload class (single and share
pods are batch, gangs training) unless `policy` names one for all streams; every policy in use observes
every allocation and release, as in the cycle.
"""

from __future__ import annotations

import resource
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.scheduler.placement.scoring import ScorePolicy
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

GiB = 1024
SHARE_MILLI = (100, 200, 250, 500)

# Stream lengths per node of the fleet when not given (the 5,000-node run's 50,000 / 2,000 / 50,000 pods,
# gangs, share pods and 30,000 resident share pods).
PODS_PER_NODE = 10
GANGS_PER_NODE = 0.4
SHARE_PODS_PER_NODE = 10
SHARE_RESIDENT_PER_NODE = 6
# The workload class of each stream's workloads: what chooses its policy when none is given.
STREAM_CLASSES = {"pods": "batch", "gangs": "training", "share": "batch"}


@dataclass(frozen=True, slots=True)
class ThroughputConfig:
    nodes: int = 5000
    gpus_per_node: int = 8
    pods: int = 50_000
    gangs: int = 2000
    share_pods: int = 50_000
    seed: int = 0
    policy: str | None = None
    """One scoring policy for every stream; None: the scheduler's default for each stream's class."""
    nodes_per_rack: int = 32
    racks_per_block: int = 8
    max_gang: int = 64
    pod_occupancy: float = 0.5
    gang_occupancy: float = 0.75
    share_resident: int | None = None  # None: SHARE_RESIDENT_PER_NODE per node

    @classmethod
    def for_fleet(
        cls,
        nodes: int,
        *,
        pods: int | None = None,
        gangs: int | None = None,
        share_pods: int | None = None,
        gpus_per_node: int = 8,
        seed: int = 0,
        policy: str | None = None,
    ) -> ThroughputConfig:
        """A run on `nodes` nodes; each stream not given is scaled to the fleet (see the module doc)."""
        return cls(
            nodes=nodes,
            pods=PODS_PER_NODE * nodes if pods is None else pods,
            gangs=max(1, round(GANGS_PER_NODE * nodes)) if gangs is None else gangs,
            share_pods=SHARE_PODS_PER_NODE * nodes if share_pods is None else share_pods,
            gpus_per_node=gpus_per_node,
            seed=seed,
            policy=policy,
        )

    @property
    def resident_share_pods(self) -> int:
        return SHARE_RESIDENT_PER_NODE * self.nodes if self.share_resident is None else self.share_resident

    def policies(self) -> dict[str, str]:
        """The policy name of each stream."""
        scheduler = SchedulerConfig(placement=self.policy)
        return {stream: scheduler.policy_for(cls) for stream, cls in STREAM_CLASSES.items()}

    def policy_text(self) -> str:
        """The policy used, in words: one name, or each stream's when they differ."""
        names = self.policies()
        if len(set(names.values())) == 1:
            return next(iter(names.values()))
        return ", ".join(f"{stream} {name}" for stream, name in names.items())


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    nodes: int
    gpus: int
    policy: str
    pods: int
    pods_placed: int
    pods_rejected: int
    pods_per_s: float
    p50_pod_ms: float
    p99_pod_ms: float
    p99_pod_cpu_ms: float
    gangs: int
    gangs_placed: int
    gangs_rejected: int
    gang_pods_placed: int
    gangs_per_s: float
    p50_gang_ms: float
    p99_gang_ms: float
    p99_gang_cpu_ms: float
    p99_rack_gang_ms: float
    p99_block_gang_ms: float
    p99_gang_33_64_ms: float
    share_pods: int
    share_placed: int
    share_rejected: int
    share_per_s: float
    p99_share_ms: float
    p99_share_cpu_ms: float
    placed_total: int
    peak_resident_pods: int
    peak_rss_mib: float
    wall_s: float

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def build_fleet(config: ThroughputConfig) -> FleetState:
    """The synthetic fleet: node i sits in rack i // nodes_per_rack, block rack // racks_per_block."""
    state = FleetState(("block", "rack"), max_gpus=config.gpus_per_node, capacity=config.nodes)
    for i in range(config.nodes):
        rack = i // config.nodes_per_rack
        block = rack // config.racks_per_block
        state.add_node(
            NodeSpec(
                name=f"node-{i:05d}",
                gpu_model="H100-80GB",
                gpus=config.gpus_per_node,
                cpu_milli=config.gpus_per_node * 24_000,
                memory_mib=config.gpus_per_node * 256 * GiB,
                labels={"block": f"b{block}", "rack": f"r{rack}"},
            )
        )
    return state


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.array(samples) * 1000.0, q)) if samples else 0.0


class _Pool:
    """Resident items with O(1) removal of a random one (swap with the last)."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, item: str) -> None:
        self.items.append(item)

    def pop_random(self, rng: np.random.Generator) -> str:
        i = int(rng.integers(len(self.items)))
        self.items[i], self.items[-1] = self.items[-1], self.items[i]
        return self.items.pop()


class _Bench:
    def __init__(self, config: ThroughputConfig, progress: Callable[[str], None] | None) -> None:
        self.config = config
        self.state = build_fleet(config)
        self.policy_of = config.policies()
        self.policies: dict[str, ScorePolicy] = {name: get_policy(name) for name in self.policy_of.values()}
        self.rng = np.random.default_rng(config.seed)
        self.progress = progress or (lambda _msg: None)
        self.placed_total = 0
        # CPU time per decision beside wall time: on a shared machine the difference is other
        # processes' time slices, not the scheduler's work.
        self.cpu: dict[str, list[float]] = {"pods": [], "gangs": [], "share": []}
        self.peak_resident = 0

    def _place(self, workload: Workload, stream: str) -> tuple[float, int]:
        policies = list(self.policies.values())
        cpu = time.process_time()
        start = time.perf_counter()
        statement = Statement(self.state, observers=policies)
        policy = self.policies[self.policy_of[stream]]
        result = place_workload(self.state, workload, policy=policy, rng=self.rng, statement=statement)
        statement.commit()
        requests = {ps.name: ps.request for ps in workload.pod_sets}
        for placement in result.placements:
            for each in policies:
                each.learn(requests[placement.pod_set])
        elapsed = time.perf_counter() - start
        self.cpu[stream].append(time.process_time() - cpu)
        placed = len(result.placements)
        self.placed_total += placed
        self.peak_resident = max(self.peak_resident, len(self.state.allocations))
        return elapsed, placed

    def _release(self, pod: str) -> None:
        alloc = self.state.release(pod)
        for policy in self.policies.values():
            policy.observe(self.state, alloc.node)

    def single_pods(self) -> tuple[list[float], int]:
        cfg = self.config
        request = PodRequest(gpus=1, cpu_milli=4000, memory_mib=32 * GiB)
        cap = int(cfg.pod_occupancy * cfg.nodes * cfg.gpus_per_node)
        pool = _Pool()
        times: list[float] = []
        placed = 0
        for i in range(cfg.pods):
            while len(pool.items) >= cap:
                self._release(pool.pop_random(self.rng))
            workload = Workload(f"pod{i}", (PodSet("p", 1, request),), workload_class=STREAM_CLASSES["pods"])
            elapsed, n = self._place(workload, "pods")
            times.append(elapsed)
            if n:
                placed += 1
                pool.add(f"pod{i}/p/0")
        for pod in pool.items:
            self._release(pod)
        return times, placed

    def gangs(self) -> tuple[list[float], dict[str, list[float]], int, int]:
        cfg = self.config
        request = PodRequest(gpus=cfg.gpus_per_node, cpu_milli=16_000, memory_mib=128 * GiB)
        budget = int(cfg.gang_occupancy * cfg.nodes * cfg.gpus_per_node)
        running: deque[tuple[list[str], int]] = deque()
        held = 0
        times: list[float] = []
        by_kind: dict[str, list[float]] = {"rack": [], "block": [], "33-64": []}
        placed = pods = 0
        # Small fleets (smoke runs) get gangs that can fit: at most one block, and within the budget.
        largest = max(
            2, min(cfg.max_gang, cfg.nodes_per_rack * cfg.racks_per_block, budget // cfg.gpus_per_node)
        )
        for i in range(cfg.gangs):
            size = int(self.rng.integers(2, largest + 1))
            need = size * cfg.gpus_per_node
            level = "rack" if size <= cfg.nodes_per_rack and self.rng.random() < 0.5 else "block"
            while running and held + need > budget:
                gang_pods, gpus = running.popleft()
                for pod in gang_pods:
                    self._release(pod)
                held -= gpus
            workload = Workload(
                f"gang{i}",
                (PodSet("w", size, request),),
                topology=TopologyRequest(required=level),
                workload_class=STREAM_CLASSES["gangs"],
            )
            elapsed, n = self._place(workload, "gangs")
            times.append(elapsed)
            by_kind[level].append(elapsed)
            if size > cfg.nodes_per_rack:
                by_kind["33-64"].append(elapsed)
            if n:
                placed += 1
                pods += n
                running.append(([workload.pod_name("w", k) for k in range(n)], n * cfg.gpus_per_node))
                held += n * cfg.gpus_per_node
        return times, by_kind, placed, pods

    def share_pods(self) -> tuple[list[float], int]:
        cfg = self.config
        requests = [PodRequest(gpu_milli=m, cpu_milli=1000, memory_mib=8 * GiB) for m in SHARE_MILLI]
        pool = _Pool()
        times: list[float] = []
        placed = 0
        for i in range(cfg.share_pods):
            while len(pool.items) >= cfg.resident_share_pods:
                self._release(pool.pop_random(self.rng))
            request = requests[int(self.rng.integers(len(requests)))]
            share = Workload(f"share{i}", (PodSet("p", 1, request),), workload_class=STREAM_CLASSES["share"])
            elapsed, n = self._place(share, "share")
            times.append(elapsed)
            if n:
                placed += 1
                pool.add(f"share{i}/p/0")
        return times, placed


def run_throughput(
    config: ThroughputConfig, *, progress: Callable[[str], None] | None = None
) -> ThroughputResult:
    """Runs the three streams and measures them; see the module docstring for what is measured."""
    wall = time.perf_counter()
    bench = _Bench(config, progress)
    bench.progress(f"fleet of {config.nodes} nodes built")
    pod_times, pods_placed = bench.single_pods()
    bench.progress(f"{config.pods} single-GPU pods done")
    gang_times, by_kind, gangs_placed, gang_pods = bench.gangs()
    bench.progress(f"{config.gangs} gangs done")
    share_times, share_placed = bench.share_pods()
    bench.progress(f"{config.share_pods} share pods done")
    return ThroughputResult(
        nodes=config.nodes,
        gpus=config.nodes * config.gpus_per_node,
        policy=config.policy_text(),
        pods=config.pods,
        pods_placed=pods_placed,
        pods_rejected=config.pods - pods_placed,
        pods_per_s=_rate(pod_times),
        p50_pod_ms=_ms(pod_times, 50),
        p99_pod_ms=_ms(pod_times, 99),
        p99_pod_cpu_ms=_ms(bench.cpu["pods"], 99),
        gangs=config.gangs,
        gangs_placed=gangs_placed,
        gangs_rejected=config.gangs - gangs_placed,
        gang_pods_placed=gang_pods,
        gangs_per_s=_rate(gang_times),
        p50_gang_ms=_ms(gang_times, 50),
        p99_gang_ms=_ms(gang_times, 99),
        p99_gang_cpu_ms=_ms(bench.cpu["gangs"], 99),
        p99_rack_gang_ms=_ms(by_kind["rack"], 99),
        p99_block_gang_ms=_ms(by_kind["block"], 99),
        p99_gang_33_64_ms=_ms(by_kind["33-64"], 99),
        share_pods=config.share_pods,
        share_placed=share_placed,
        share_rejected=config.share_pods - share_placed,
        share_per_s=_rate(share_times),
        p99_share_ms=_ms(share_times, 99),
        p99_share_cpu_ms=_ms(bench.cpu["share"], 99),
        placed_total=bench.placed_total,
        peak_resident_pods=bench.peak_resident,
        peak_rss_mib=round(_peak_rss_mib(), 1),
        wall_s=round(time.perf_counter() - wall, 2),
    )


def _rate(times: list[float] | npt.NDArray[np.float64]) -> float:
    total = float(np.sum(times))
    return len(times) / total if total > 0 else 0.0
