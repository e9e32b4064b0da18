"""Admission and preemption benchmark: Kueue's performance-gate shape on a synthetic GPU fleet.

Phase 1 (admission): a tree of organisations x teams x leaf queues whose nominal quotas add up to the
fleet, and a stream of workloads of mixed priorities and sizes beyond capacity; the scheduler runs
cycles until nothing changes. Reported: admission decisions (admissions and evictions) per second of
scheduling time.

Phase 2 (preemption): into the full fleet, high-priority arrivals one at a time, each decided by one
cycle; reported: p50/p99 of those cycles that preempted.

The scheduler is the scheduling core itself; this module only builds its inputs and times it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.queueing import QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

MODEL = "H100-80GB"
GPUS_PER_NODE = 8
PRIORITIES = (100, 1_000, 10_000)
SIZES = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2))  # (GPUs per pod, pods)
SIZE_WEIGHTS = (0.3, 0.25, 0.2, 0.15, 0.1)


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    policy: str
    queues: int
    workloads: int
    nodes: int
    admitted: int
    decisions: int
    cycles: int
    seconds: float
    decisions_per_s: float
    preemption_arrivals: int
    preemption_cycles: int
    # None when no arrival preempted anything: there is no latency to report, not a latency of 0.
    p50_preemption_ms: float | None
    p99_preemption_ms: float | None

    def to_dict(self) -> dict[str, str | float | int | None]:
        return {
            "policy": self.policy,
            "queues": self.queues,
            "workloads": self.workloads,
            "nodes": self.nodes,
            "admitted": self.admitted,
            "decisions": self.decisions,
            "cycles": self.cycles,
            "seconds": round(self.seconds, 3),
            "decisions_per_s": round(self.decisions_per_s, 1),
            "preemption_arrivals": self.preemption_arrivals,
            "preemption_cycles": self.preemption_cycles,
            "p50_preemption_ms": _round(self.p50_preemption_ms),
            "p99_preemption_ms": _round(self.p99_preemption_ms),
        }


def _round(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 2)


def _checked(result: CycleResult) -> CycleResult:
    """The cycle's result. Figures must not stand over a bug: an attempt that raised (the core leaves
    that workload waiting, `CycleResult.errors`) stops the benchmark with its error."""
    for error in result.errors.values():
        raise error
    return result


def build_fleet(nodes: int) -> FleetState:
    fleet = FleetState(("block", "rack"), capacity=nodes)
    for i in range(nodes):
        labels = {"block": f"b{i // 1000}", "rack": f"r{i // 20}"}
        fleet.add_node(
            NodeSpec(
                name=f"node-{i}",
                gpu_model=MODEL,
                gpus=GPUS_PER_NODE,
                cpu_milli=192_000,
                memory_mib=2 * 1024 * 1024,
                labels=labels,
                sharing=SharingMode.EXCLUSIVE,
            )
        )
    return fleet


def build_tree(leaves: int, total_gpus: int) -> tuple[QuotaTree, list[str]]:
    """Organisations x teams x leaf queues (10 x 10 x 10 for 1,000 leaves); nominal quotas sum to the
    fleet."""
    fan = max(1, round(leaves ** (1 / 3)))
    nodes = [QuotaNode("root")]
    leaf_names: list[str] = []
    per_leaf = total_gpus * 1000 // leaves
    for o in range(fan):
        org = f"org{o}"
        nodes.append(QuotaNode(org, "root"))
        for t in range(fan):
            team = f"{org}-team{t}"
            nodes.append(QuotaNode(team, org))
            for q in range(fan):
                if len(leaf_names) == leaves:
                    break
                name = f"{team}-q{q}"
                nodes.append(QuotaNode(name, team, {MODEL: FlavorLimits(per_leaf)}))
                leaf_names.append(name)
    return QuotaTree(nodes), leaf_names


def make_workloads(
    count: int, queues: list[str], rng: np.random.Generator, *, start: float = 0.0
) -> list[Workload]:
    sizes = rng.choice(len(SIZES), size=count, p=SIZE_WEIGHTS)
    prios = rng.choice(len(PRIORITIES), size=count, p=(0.3, 0.5, 0.2))
    picks = rng.integers(len(queues), size=count)
    out = []
    for i in range(count):
        gpus, pods = SIZES[int(sizes[i])]
        request = PodRequest(cpu_milli=8_000 * gpus, memory_mib=64 * 1024 * gpus, gpus=gpus)
        out.append(
            Workload(
                name=f"wl-{i}",
                pod_sets=(PodSet("main", pods, request),),
                queue=queues[int(picks[i])],
                priority=PRIORITIES[int(prios[i])],
                user=f"user{i % 7}",
                submitted_at=start + i * 1e-3,
            )
        )
    return out


def run(
    *, queues: int, workloads: int, nodes: int, arrivals: int, seed: int = 0, policy: str | None = None
) -> AdmissionResult:
    rng = np.random.default_rng(seed)
    fleet = build_fleet(nodes)
    tree, leaves = build_tree(queues, nodes * GPUS_PER_NODE)
    settings = {name: QueueSettings(name) for name in tree.nodes}
    cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(3600.0))
    # The workloads are batch: `policy` places all of them; None leaves the scheduler's default for batch.
    config = SchedulerConfig(placement=policy, seed=seed)
    scheduler = Scheduler(config)
    for workload in make_workloads(workloads, leaves, rng):
        cache.submit(workload)

    now = float(workloads) * 1e-3 + 1.0
    decisions = cycles = 0
    spent = 0.0
    while cycles < 200:
        began = time.perf_counter()
        result = _checked(scheduler.cycle(cache, now=now))
        apply_decisions(cache, result, now=now)
        spent += time.perf_counter() - began
        cycles += 1
        decisions += len(result.admitted) + len(result.preempted)
        if not result.changed:
            break
    admitted = len(cache.admitted)

    # Phase 2: the backlog is withdrawn; high-priority arrivals come one by one into the full fleet.
    cache.pending.clear()
    now += 3600.0
    latencies: list[float] = []
    for i in range(arrivals):
        request = PodRequest(cpu_milli=64_000, memory_mib=512 * 1024, gpus=8)
        queue = leaves[int(rng.integers(len(leaves)))]
        cache.submit(
            Workload(
                f"urgent-{i}",
                (PodSet("main", 1, request),),
                queue=queue,
                priority=1_000_000,
                submitted_at=now,
            )
        )
        began = time.perf_counter()
        result = _checked(scheduler.cycle(cache, now=now))
        elapsed = time.perf_counter() - began
        apply_decisions(cache, result, now=now)
        if result.preempted:
            latencies.append(elapsed * 1000)
        cache.pending.clear()  # victims and the waiting arrival leave: each arrival is measured alone
        now += 1.0
    p50 = float(np.percentile(latencies, 50)) if latencies else None
    p99 = float(np.percentile(latencies, 99)) if latencies else None
    return AdmissionResult(
        policy=config.policy_for("batch"),
        queues=queues,
        workloads=workloads,
        nodes=nodes,
        admitted=admitted,
        decisions=decisions,
        cycles=cycles,
        seconds=spent,
        decisions_per_s=decisions / spent if spent else 0.0,
        preemption_arrivals=arrivals,
        preemption_cycles=len(latencies),
        p50_preemption_ms=p50,
        p99_preemption_ms=p99,
    )
