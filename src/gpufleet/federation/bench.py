"""`gpufleet bench federation`: the dispatcher over simulated worker clusters (summaries only).

Each worker is a FleetState of `nodes` 8-GPU nodes in blocks and racks, filled to a random level, and
reports the summary `summarize` makes of it. A stream of workloads (single GPUs, whole hosts, gangs of
2 to 16 hosts with and without a required rack or block, shares) from queues under a fleet-wide quota,
some restricted to a region or preferring a cluster, is dispatched one at a time. Every `heartbeat_every`
decisions one worker reports again: its work so far has finished, so the manager gets its quota back
and the worker's fresh summary replaces what the dispatcher took out.

Measured: the latency of each decision (p50, p99, max), workloads dispatched per second, and the time a
worker takes to summarise itself. Checked on the way: no workload is dispatched twice and no cluster is
sent more GPUs than it reported free (either would be a dispatcher bug; the counts are in the result).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.api.labels import LabelSelector
from gpufleet.federation.dispatch import ANY_CLUSTER, ClusterChoice, Dispatched, Dispatcher
from gpufleet.federation.summary import ClusterSummary, ModelSummary, summarize
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

LEVELS = ("block", "rack")
MODELS = ("H100-80GB", "A100-80GB")
REGIONS = ("us", "eu")
HOSTS_PER_RACK = 16
RACKS_PER_BLOCK = 8
TARGET_P99_MS = 50.0
TARGET_PER_SECOND = 500.0


@dataclass(frozen=True, slots=True)
class Worker:
    """A simulated worker: its report (fresh at each heartbeat) and its labelled levels."""

    name: str
    model: str
    region: str
    price: float
    report: dict[str, ModelSummary]

    def summary(self) -> ClusterSummary:
        models = {model: summary.copy() for model, summary in self.report.items()}
        labels = {"region": self.region}
        return ClusterSummary(self.name, models, labels, {self.model: self.price}, levels=LEVELS)


def build_worker(index: int, nodes: int, rng: random.Random) -> tuple[Worker, float]:
    """A worker of `nodes` 8-GPU nodes, 20-70% used, and how long summarising it took (seconds)."""
    model = MODELS[index % len(MODELS)]
    state = FleetState(LEVELS, capacity=nodes)
    for n in range(nodes):
        rack = n // HOSTS_PER_RACK
        labels = {"block": f"b{rack // RACKS_PER_BLOCK}", "rack": f"r{rack}"}
        state.add_node(NodeSpec(f"n{n}", gpu_model=model, gpus=8, labels=labels, sharing=SharingMode.DYNAMIC))
    used = rng.uniform(0.2, 0.7)
    for n in range(nodes):
        taken = min(8, int(rng.expovariate(1 / (8 * used)))) if rng.random() < used else 0
        if taken:
            state.allocate(f"p{n}", n, PodRequest(gpus=taken), tuple(range(taken)))
    started = time.perf_counter()
    report = summarize(state)
    took = time.perf_counter() - started
    price = round(2.0 + (index % 5) * 0.25 + (0.5 if model == MODELS[1] else 0.0), 2)
    return Worker(f"w{index}", model, REGIONS[index % len(REGIONS)], price, report), took


def quota_tree(queues: int, total_gpus: int) -> QuotaUsage:
    """`queues` leaf queues under one root; together they are guaranteed the fleet, each may borrow."""
    nominal = total_gpus * 1000 // max(queues, 1)
    limits = {model: FlavorLimits(nominal, borrowing_limit=nominal) for model in MODELS}
    nodes = [QuotaNode("root"), *(QuotaNode(f"q{i}", "root", limits) for i in range(queues))]
    return QuotaUsage(QuotaTree(nodes))


def workload_stream(count: int, queues: int, rng: random.Random) -> list[tuple[Workload, ClusterChoice]]:
    """Workloads and their queues' cluster choice: mostly small, some big gangs, a few shares."""
    out: list[tuple[Workload, ClusterChoice]] = []
    for i in range(count):
        queue = i % queues
        roll = rng.random()
        if roll < 0.35:
            pod_set, topology = PodSet("main", 1, PodRequest(gpus=rng.choice((1, 2, 4)))), TopologyRequest()
        elif roll < 0.45:
            pod_set, topology = (
                PodSet("main", rng.choice((1, 2, 4)), PodRequest(gpu_milli=500)),
                TopologyRequest(),
            )
        elif roll < 0.7:
            pod_set, topology = PodSet("main", 1, PodRequest(gpus=8)), TopologyRequest()
        else:
            hosts = rng.choice((2, 4, 8, 16))
            required = rng.choice((None, "rack", "block")) if hosts <= HOSTS_PER_RACK else "block"
            pod_set, topology = PodSet("main", hosts, PodRequest(gpus=8)), TopologyRequest(required=required)
        choice = ANY_CLUSTER
        if queue % 4 == 1:
            choice = ClusterChoice(selector=LabelSelector.parse(f"region={REGIONS[queue % 2]}"))
        elif queue % 4 == 2:
            choice = ClusterChoice(preferred=frozenset({f"w{queue % 3}"}))
        out.append((Workload(f"wl-{i}", (pod_set,), queue=f"q{queue}", topology=topology), choice))
    return out


def run(
    *, clusters: int, nodes: int, workloads: int, queues: int = 40, heartbeat_every: int = 20, seed: int = 0
) -> dict[str, Any]:
    rng = random.Random(seed)
    built = [build_worker(i, nodes, rng) for i in range(clusters)]
    workers = {worker.name: worker for worker, _ in built}
    summarize_ms = [took * 1000 for _, took in built]
    usage = quota_tree(queues, clusters * nodes * 8)
    dispatcher = Dispatcher([w.summary() for w in workers.values()], usage)
    running: dict[str, list[Dispatched]] = {name: [] for name in workers}
    sent_since_report: Counter[str] = Counter()
    seen: set[str] = set()
    outcomes: Counter[str] = Counter()
    latencies = np.zeros(workloads)
    twice = overcommitted = 0
    stream = workload_stream(workloads, queues, rng)
    heartbeat = 0
    started = time.perf_counter()
    for i, (workload, choice) in enumerate(stream):
        t0 = time.perf_counter()
        decision = dispatcher.dispatch(workload, choice)
        latencies[i] = time.perf_counter() - t0
        if isinstance(decision, Dispatched):
            outcomes["Dispatched"] += 1
            twice += decision.workload in seen
            seen.add(decision.workload)
            running[decision.cluster].append(decision)
            sent_since_report[decision.cluster] += sum(decision.usage.values())
            reported = workers[decision.cluster].report[decision.model or ""]
            # dynamic GPUs: free milli counts the free whole GPUs too
            free = max(reported.free_gpus * 1000, reported.free_share_milli)
            overcommitted += sent_since_report[decision.cluster] > free
        else:
            outcomes[decision.reason] += 1
        if (i + 1) % heartbeat_every == 0:
            # One worker reports: what it ran has finished, the quota comes back, its count is fresh.
            name = f"w{heartbeat % clusters}"
            heartbeat += 1
            for done in running[name]:
                dispatcher.release(done)
            running[name].clear()
            sent_since_report[name] = 0
            dispatcher.update(workers[name].summary())
    elapsed = time.perf_counter() - started
    p99 = float(np.percentile(latencies, 99) * 1000) if workloads else 0.0
    per_second = outcomes["Dispatched"] / elapsed if elapsed > 0 else 0.0
    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "gpus": clusters * nodes * 8,
        "workloads": workloads,
        "dispatched": outcomes["Dispatched"],
        "not_dispatched": {k: v for k, v in sorted(outcomes.items()) if k != "Dispatched"},
        "dispatch_p50_ms": round(float(np.percentile(latencies, 50) * 1000), 4) if workloads else 0.0,
        "dispatch_p99_ms": round(p99, 4),
        "dispatch_max_ms": round(float(latencies.max(initial=0) * 1000), 4),
        "dispatched_per_second": round(per_second, 1),
        "decisions_per_second": round(workloads / elapsed, 1) if elapsed > 0 else 0.0,
        "summarize_ms_per_cluster": round(float(np.mean(summarize_ms)), 3),
        "dispatched_twice": twice,
        "overcommitted_decisions": overcommitted,
        "target_p99_met": p99 <= TARGET_P99_MS,
        "target_rate_met": per_second >= TARGET_PER_SECOND,
    }
