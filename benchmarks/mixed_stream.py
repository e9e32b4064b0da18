"""Packing policies on a training-like mixed stream: what each leaves for gangs.

    .venv/bin/python benchmarks/mixed_stream.py [--policies bestfit,fgd+] [--seeds 3] [--gang-weight 0.14]

A fleet of 8-GPU nodes (one NVLink domain each; 16 nodes a rack, 4 racks a block) receives one arrival
per time step: 1-, 2- and 4-GPU pods, GPU-share pods, CPU-only pods and gangs of 2 to 12 whole-node pods
(half of them require one rack; `--gang-weight` is the share of arrivals that are gangs). Each arrival
stays for an exponential lifetime sized so that the offered GPU load is `--load` times the fleet; what
does not fit at once is dropped (no queue, no preemption), so what a policy leaves fragmented shows as
gangs and GPUs turned away. Every placement is one
`place_workload` call with the policy under test, followed by `learn` for each pod placed, as in the
scheduling cycle. The arrivals and lifetimes of a seed are drawn once, from their own generator, and
offered to every policy; the policies' tie-breaks draw from another, so policies are compared on the
same stream.

Reported per policy, over the steps after the warm-up (mean over seeds):
- gangs placed: the fraction of arriving gangs that were placed; rack gangs placed: the same for the
  gangs that require one rack;
- GPU demand placed: GPUs placed over GPUs asked, all arrivals;
- fragmented: free GPUs that no whole-node pod can use (free GPUs on nodes that are not entirely
  free), as a percentage of all GPUs, averaged over steps;
- whole nodes free: entirely free nodes, as a percentage of nodes, averaged over steps;
- one domain: whether every placed rack-required gang got a single rack (it must).
"""

from __future__ import annotations

import argparse
import heapq
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import GPU_MILLI, PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.scheduler.placement.scoring import ScorePolicy
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

GiB = 1024
GPUS = 8
NODES_PER_RACK = 16
RACKS_PER_BLOCK = 4

# (weight, pod request, pods per arrival range or None for one pod)
ONE = PodRequest(gpus=1, cpu_milli=12_000, memory_mib=64 * GiB)
TWO = PodRequest(gpus=2, cpu_milli=24_000, memory_mib=128 * GiB)
FOUR = PodRequest(gpus=4, cpu_milli=48_000, memory_mib=256 * GiB)
QUARTER = PodRequest(gpu_milli=250, cpu_milli=4_000, memory_mib=16 * GiB)
HALF = PodRequest(gpu_milli=500, cpu_milli=6_000, memory_mib=32 * GiB)
CPU_ONLY = PodRequest(cpu_milli=8_000, memory_mib=16 * GiB)
NODE = PodRequest(gpus=GPUS, cpu_milli=96_000, memory_mib=512 * GiB)
KINDS: tuple[tuple[str, float, PodRequest], ...] = (
    ("one", 0.30, ONE),
    ("two", 0.14, TWO),
    ("four", 0.08, FOUR),
    ("quarter", 0.12, QUARTER),
    ("half", 0.10, HALF),
    ("cpu", 0.12, CPU_ONLY),
    ("gang", 0.14, NODE),
)
GANG_SIZES = (2, 12)


@dataclass(slots=True)
class Outcome:
    policy: str
    seed: int
    gangs: int = 0
    gangs_placed: int = 0
    rack_gangs: int = 0
    rack_gangs_placed: int = 0
    gpus_asked: float = 0.0
    gpus_placed: float = 0.0
    fragmented: list[float] = field(default_factory=list)
    whole_free: list[float] = field(default_factory=list)
    one_domain: bool = True
    decision_s: float = 0.0
    decisions: int = 0


def build_fleet(nodes: int) -> FleetState:
    state = FleetState(("block", "rack"), max_gpus=GPUS, capacity=nodes)
    for i in range(nodes):
        rack = i // NODES_PER_RACK
        state.add_node(
            NodeSpec(
                name=f"n{i:04d}",
                gpu_model="H100-80GB",
                gpus=GPUS,
                cpu_milli=GPUS * 16_000,
                memory_mib=GPUS * 128 * GiB,
                labels={"block": f"b{rack // RACKS_PER_BLOCK}", "rack": f"r{rack}"},
            )
        )
    return state


def kind_weights(gang_weight: float) -> npt.NDArray[np.float64]:
    """Arrival probabilities: gangs `gang_weight`, the other kinds in their listed proportions."""
    weights = np.array([w for _, w, _ in KINDS])
    gang = [name for name, _, _ in KINDS].index("gang")
    others = weights.sum() - weights[gang]
    weights = weights * (1.0 - gang_weight) / others
    weights[gang] = gang_weight
    return np.asarray(weights, dtype=np.float64)


def mean_gpus(weights: npt.NDArray[np.float64]) -> float:
    """Mean GPUs asked per arrival."""
    low, high = GANG_SIZES
    total = 0.0
    for (name, _, request), weight in zip(KINDS, weights, strict=True):
        pods = (low + high) / 2 if name == "gang" else 1
        total += float(weight) * pods * request.total_gpu_milli / GPU_MILLI
    return total


@dataclass(frozen=True, slots=True)
class Arrival:
    """One step's arrival: its kind, pod request and count, the level it requires, how long it stays."""

    kind: str
    request: PodRequest
    count: int
    required: str | None
    stay: float


def make_stream(seed: int, arrivals: int, nodes: int, load: float, gang_weight: float) -> list[Arrival]:
    """The arrivals of one seed, drawn once from their own generator so that every policy sees the same
    stream (a lifetime is drawn for every arrival, placed or not, so nothing a policy does shifts it)."""
    rng = np.random.default_rng(seed)
    weights = kind_weights(gang_weight)
    lifetime = load * nodes * GPUS / mean_gpus(weights)
    stream: list[Arrival] = []
    for _ in range(arrivals):
        name, _, request = KINDS[int(rng.choice(len(KINDS), p=weights))]
        count = int(rng.integers(GANG_SIZES[0], GANG_SIZES[1] + 1)) if name == "gang" else 1
        required = "rack" if name == "gang" and rng.random() < 0.5 else None
        stream.append(Arrival(name, request, count, required, float(rng.exponential(lifetime))))
    return stream


def run(policy_name: str, seed: int, nodes: int, stream: list[Arrival], warmup: int) -> Outcome:
    # The policy's tie-breaks draw from a generator of their own, apart from the stream's.
    rng = np.random.default_rng([seed, 1])
    state = build_fleet(nodes)
    policy: ScorePolicy = get_policy(policy_name)
    out = Outcome(policy_name, seed)
    leaving: list[tuple[float, int, list[str]]] = []
    rows = state.n_rows
    for step, arrival in enumerate(stream):
        while leaving and leaving[0][0] <= step:
            _, _, pods = heapq.heappop(leaving)
            for pod in pods:
                alloc = state.release(pod)
                policy.observe(state, alloc.node)
        name, request, count, required = arrival.kind, arrival.request, arrival.count, arrival.required
        workload = Workload(
            f"w{step}",
            (PodSet("p", count, request),),
            topology=TopologyRequest(required=required),
            workload_class="training" if name == "gang" else "batch",
        )
        statement = Statement(state, observers=[policy])
        started = time.perf_counter()
        result = place_workload(state, workload, policy=policy, rng=rng, statement=statement)
        statement.commit()
        for _ in result.placements:
            policy.learn(request)
        measured = step >= warmup
        if measured:
            out.decision_s += time.perf_counter() - started
            out.decisions += 1
        placed = result.no_fit is None
        if placed:
            heapq.heappush(leaving, (step + arrival.stay, step, [p.pod for p in result.placements]))
        if not measured:
            continue
        asked = count * request.total_gpu_milli / GPU_MILLI
        out.gpus_asked += asked
        out.gpus_placed += asked if placed else 0.0
        if name == "gang":
            out.gangs += 1
            out.gangs_placed += placed
            if required:
                out.rack_gangs += 1
                out.rack_gangs_placed += placed
                if placed:
                    racks = {state.specs[p.row].labels.get("rack") for p in result.placements}
                    out.one_domain &= len(racks) == 1
        free = state.usable_gpu_free()[:rows]
        whole = (free == GPU_MILLI).all(axis=1)
        free_gpus = float(free.sum()) / GPU_MILLI
        out.fragmented.append(100.0 * (free_gpus - GPUS * int(whole.sum())) / (rows * GPUS))
        out.whole_free.append(100.0 * float(whole.mean()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="bestfit,fgd+")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--arrivals", type=int, default=6000)
    parser.add_argument("--warmup", type=int, default=1500)
    parser.add_argument("--load", type=float, default=1.1)
    parser.add_argument("--gang-weight", type=float, default=0.14)
    args = parser.parse_args()
    header = (
        "| policy | gangs placed % | rack gangs placed % | GPU demand placed % | fragmented % of GPUs "
        "| whole nodes free % | one domain | ms/decision |"
    )
    print(header)
    print("|" + "---|" * 8)
    streams = [
        make_stream(s, args.arrivals, args.nodes, args.load, args.gang_weight) for s in range(args.seeds)
    ]
    for name in args.policies.split(","):
        runs = [run(name, s, args.nodes, streams[s], args.warmup) for s in range(args.seeds)]

        def pct(num: list[float], den: list[float]) -> str:
            values = [100.0 * n / d for n, d in zip(num, den, strict=True) if d]
            return f"{np.mean(values):.1f} ± {np.std(values):.1f}"

        gangs = pct([r.gangs_placed for r in runs], [r.gangs for r in runs])
        rack = pct([r.rack_gangs_placed for r in runs], [r.rack_gangs for r in runs])
        demand = pct([r.gpus_placed for r in runs], [r.gpus_asked for r in runs])
        frag = np.mean([np.mean(r.fragmented) for r in runs])
        whole = np.mean([np.mean(r.whole_free) for r in runs])
        one = all(r.one_domain for r in runs)
        ms = 1000.0 * sum(r.decision_s for r in runs) / max(1, sum(r.decisions for r in runs))
        print(f"| {name} | {gangs} | {rack} | {demand} | {frag:.2f} | {whole:.2f} | {one} | {ms:.2f} |")


if __name__ == "__main__":
    main()
