"""The fleet and the queues a job-level simulation runs on.

`--gpus N` is a fleet of N GPUs in 8-GPU H100 nodes, 32 nodes a rack (one GPUPool, its racks filled
evenly by the pool controller). `--fleet FILE` is a YAML file of GPUPools (any other kind in it is
refused). Without `--queues FILE` each virtual cluster of the trace becomes a leaf queue under one
root, its nominal quota of every GPU model of the fleet proportional to its share of the trace's GPU
demand (GPU-seconds), rounded by largest remainder so that the quotas add up to the fleet; borrowing
is unlimited, so idle quota is lent, and reclaimed by preemption when its owner needs it back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from gpufleet.api.documents import load_objects
from gpufleet.api.errors import DataError, ValidationError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.pool import MAX_POOL_NODES, GPUPool, GPUPoolSpec, NodeResources, PoolTopology
from gpufleet.api.queue import FlavorQuota, LeastAttainedService, Queue, QueuePreemption, QueueSpec
from gpufleet.api.resource import Resource
from gpufleet.sharing.mig import COMPUTE_SLICES, find_profile, mig_models
from gpufleet.sim.philly import Trace, TraceJob

GPUS_PER_NODE = 8
NODES_PER_RACK = 32
GPU_MODEL = "H100-80GB"
PRICE_PER_GPU_HOUR = 3.0
ROOT_QUEUE = "trace"
MAX_FLEET_NODES = MAX_POOL_NODES
"""The most nodes a simulated fleet holds, all pools together: one cluster's worth. 65,536 nodes
take about 2 GB and 40 s to build; far more would exhaust the machine before the first job ran."""

FIFO_QUEUE = "fifo"
LAS_QUEUE = "las"
POLICIES = ("gpufleet", "fifo", "las")
"""gpufleet: a queue per virtual cluster with gpufleet's defaults; fifo and las: the baselines, one
queue owning the fleet (FIFO without preemption; Tiresias' discretised least attained service)."""

_Kind = TypeVar("_Kind", bound=Resource)


def fleet_of_gpus(gpus: int, *, price: float = PRICE_PER_GPU_HOUR, spot: bool = False) -> list[GPUPool]:
    """N GPUs as 8-GPU H100 nodes, 32 nodes a rack, in one on-demand (or spot) pool."""
    if gpus < GPUS_PER_NODE or gpus % GPUS_PER_NODE or gpus > MAX_FLEET_NODES * GPUS_PER_NODE:
        raise DataError(
            f"must be a positive multiple of {GPUS_PER_NODE}, at most {MAX_FLEET_NODES * GPUS_PER_NODE:,} "
            f"({MAX_FLEET_NODES:,} nodes), got {gpus}",
            path="--gpus",
        )
    nodes = gpus // GPUS_PER_NODE
    return [
        GPUPool(
            metadata=ObjectMeta(name="h100"),
            spec=GPUPoolSpec(
                gpu_model=GPU_MODEL,
                gpus_per_node=GPUS_PER_NODE,
                node_resources=NodeResources(cpu="192", memory="2Ti"),
                capacity_type="spot" if spot else "on-demand",
                price_per_gpu_hour=price,
                nodes=nodes,
                topology=PoolTopology(block="b1", racks=math.ceil(nodes / NODES_PER_RACK)),
            ),
        )
    ]


def load_pools(path: str | Path) -> list[GPUPool]:
    """The GPUPools of a YAML file; another kind in it, a name given twice, an autoscaled pool or more
    than `MAX_FLEET_NODES` nodes in all is a DataError."""
    pools = _load_only(path, GPUPool, "fleet")
    for pool in pools:
        if pool.spec.autoscaling is not None:
            # Quotas, utilisation and cost are all taken over the pools' nodes: a pool that grew or
            # shrank would make every one of them wrong, and the quotas would keep it from growing.
            raise DataError(
                f"GPUPool {pool.name}: field spec.autoscaling: a simulated fleet keeps its size; "
                "give the pool's spec.nodes instead",
                path=str(path),
            )
    most = sum(p.spec.nodes for p in pools)
    if most > MAX_FLEET_NODES:
        raise DataError(
            f"the pools hold {most:,} nodes together; a simulated fleet holds at most {MAX_FLEET_NODES:,}",
            path=str(path),
        )
    return pools


def load_queues(path: str | Path) -> list[Queue]:
    """The Queues of a YAML file; another kind in it is a DataError."""
    return _load_only(path, Queue, "queues")


def _load_only(path: str | Path, kind: type[_Kind], what: str) -> list[_Kind]:
    """The objects of one kind in a YAML file (at least one, each name once); any other kind is a
    DataError. A second object of a name would silently replace the first in the store."""
    found: list[_Kind] = []
    names: set[str] = set()
    for obj in load_objects(Path(path)):
        if not isinstance(obj, kind):
            raise DataError(
                f"{obj.kind} {obj.name}: a {what} file holds {kind.__name__}s only", path=str(path)
            )
        if obj.name in names:
            raise DataError(f"{obj.kind} {obj.name}: the name is given twice", path=str(path))
        names.add(obj.name)
        found.append(obj)
    if not found:
        raise DataError(f"no {kind.__name__} in the {what} file", path=str(path))
    return found


def queue_name(cluster: str, policy: str = "gpufleet") -> str:
    """The queue a virtual cluster's jobs go to: `vc-<cluster>` (a valid DNS label whatever the
    cluster id), or the one queue of a baseline (`fifo`, `las`)."""
    if policy == "fifo":
        return FIFO_QUEUE
    if policy == "las":
        return LAS_QUEUE
    return f"vc-{cluster.lower()}"


def fleet_gpus(pools: Sequence[GPUPool]) -> dict[str, int]:
    """GPUs the pools start with, per GPU model, and MIG instances per profile (a MIG request is
    counted in its profile's flavor, one per instance): what the queues' quotas are made of."""
    out: dict[str, int] = {}
    for pool in pools:
        out[pool.spec.gpu_model] = out.get(pool.spec.gpu_model, 0) + pool.spec.nodes * pool.spec.gpus_per_node
        for profile, count in mig_instances(pool).items():
            out[profile] = out.get(profile, 0) + count
    return out


def mig_instances(pool: GPUPool) -> dict[str, int]:
    """MIG instances per profile on the pool's starting nodes (its layout per GPU index, `*` for the
    GPUs not named)."""
    sharing = pool.spec.sharing
    layouts = sharing.mig if sharing is not None and sharing.mig is not None else {}
    out: dict[str, int] = {}
    for gpu in range(pool.spec.gpus_per_node):
        for profile in layouts.get(str(gpu), layouts.get("*", [])):
            out[profile] = out.get(profile, 0) + pool.spec.nodes
    return out


def runnable(pools: Sequence[GPUPool]) -> Callable[[TraceJob], bool]:
    """Whether the fleet could ever run a job: a MIG job needs a pool with instances of its profile,
    a whole-GPU job no more GPUs than the GPUs no MIG layout partitions. A job that cannot is left
    out of the run (and counted), as it would otherwise wait for ever. The fleet is counted once for
    all the jobs asked about (the whole trace is 82,000 of them)."""
    profiles = {profile for pool in pools for profile in mig_instances(pool)}
    whole = 0
    for pool in pools:
        sharing = pool.spec.sharing
        layouts = sharing.mig if sharing is not None and sharing.mig is not None else {}
        split = sum(1 for gpu in range(pool.spec.gpus_per_node) if layouts.get(str(gpu), layouts.get("*")))
        whole += pool.spec.nodes * (pool.spec.gpus_per_node - split)

    def runs(job: TraceJob) -> bool:
        return job.mig in profiles if job.mig is not None else job.gpus <= whole

    return runs


def check_runnable(jobs: Sequence[TraceJob], pools: Sequence[GPUPool], obj: str) -> None:
    """Refuses a window none of whose jobs the fleet could ever run: every one would be left out, and
    the run would report nothing but an idle fleet."""
    runs = runnable(pools)
    if jobs and not any(runs(job) for job in jobs):
        first = jobs[0]
        asks = (
            f"a {first.mig} MIG instance"
            if first.mig is not None
            else f"{first.gpus:,} GPU{'' if first.gpus == 1 else 's'}"
        )
        capacity = sum(p.spec.nodes * p.spec.gpus_per_node for p in pools)
        raise ValidationError(
            f"none of the {len(jobs):,} jobs submitted in the window fits the fleet of {capacity:,} GPUs "
            f"(line {first.line} asks for {asks})",
            obj=obj,
        )


def mig_share(profile: str) -> float:
    """The part of a GPU's compute a MIG instance of `profile` holds (1g.10gb: 1/7): what a MIG pod
    counts for in utilisation, as a whole-GPU pod counts 1 a GPU."""
    for model in mig_models():
        found = find_profile(model, profile)
        if found is not None:
            return found.compute_slices / COMPUTE_SLICES
    raise ValueError(f"unknown MIG profile {profile!r}")


def proportional(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """`total` split in proportion to `weights` by largest remainder (the parts add up to `total`)."""
    whole = sum(weights.values())
    if whole <= 0:
        raise ValueError("weights must add up to a positive number")
    exact = {k: total * w / whole for k, w in weights.items()}
    parts = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(parts.values())
    for key in sorted(exact, key=lambda k: (parts[k] - exact[k], k))[:left]:
        parts[key] += 1
    return parts


def trace_queues(demand: Mapping[str, float], pools: Sequence[GPUPool]) -> list[Queue]:
    """One leaf queue per virtual cluster under a root, nominal quota proportional to its GPU demand."""
    per_model = fleet_gpus(pools)
    shares = {model: proportional(gpus, demand) for model, gpus in per_model.items()}
    queues = [Queue(metadata=ObjectMeta(name=ROOT_QUEUE), spec=QueueSpec())]
    for cluster in sorted(demand):
        quotas = {model: FlavorQuota(nominal=share[cluster]) for model, share in shares.items()}
        queues.append(
            Queue(
                metadata=ObjectMeta(
                    name=queue_name(cluster), labels={"gpufleet.io/virtual-cluster": cluster}
                ),
                spec=QueueSpec(parent=ROOT_QUEUE, quotas=quotas),
            )
        )
    return queues


def fifo_queues(pools: Sequence[GPUPool]) -> list[Queue]:
    """The FIFO baseline: one queue that owns the whole fleet, tries only its head (StrictFIFO) and
    never preempts; every job of the trace goes to it."""
    quotas = {model: FlavorQuota(nominal=gpus) for model, gpus in fleet_gpus(pools).items()}
    never = QueuePreemption(within_queue="Never", reclaim_within_cohort="Never", borrow_within_cohort="Never")
    spec = QueueSpec(quotas=quotas, preemption=never, queueing_strategy="StrictFIFO")
    return [Queue(metadata=ObjectMeta(name=FIFO_QUEUE), spec=spec)]


def las_queues(pools: Sequence[GPUPool], las: LeastAttainedService | None = None) -> list[Queue]:
    """The least-attained-service baseline (Tiresias): one queue that owns the whole fleet, orders by
    levels of GPU-hours run (FIFO inside a level) and lets a job of a lower level preempt one of a
    higher level; every job of the trace goes to it. A preempted job loses the work since its last
    checkpoint, as in every run: give it a checkpoint interval (Tiresias assumes one)."""
    quotas = {model: FlavorQuota(nominal=gpus) for model, gpus in fleet_gpus(pools).items()}
    preemption = QueuePreemption(
        within_queue="LowerPriority", reclaim_within_cohort="Never", borrow_within_cohort="Never"
    )
    spec = QueueSpec(
        quotas=quotas,
        preemption=preemption,
        queueing_strategy="LeastAttainedService",
        least_attained_service=las or LeastAttainedService(),
    )
    return [Queue(metadata=ObjectMeta(name=LAS_QUEUE), spec=spec)]


def baseline_queues(policy: str, pools: Sequence[GPUPool]) -> list[Queue] | None:
    """The queues of a baseline policy, or None for `gpufleet` (whose queues come from the trace or a
    file)."""
    if policy == "fifo":
        return fifo_queues(pools)
    if policy == "las":
        return las_queues(pools)
    return None


def queues_for(
    policy: str, pools: Sequence[GPUPool], window: Trace, queues_file: str | Path | None = None
) -> list[Queue]:
    """The queues a run of `policy` uses: a baseline's own queue, the Queues of `queues_file` (which
    must hold a queue `vc-<cluster>` for every cluster of the window), or one per virtual cluster with
    nominal quota by GPU demand."""
    if policy not in POLICIES:
        raise ValidationError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}", obj="--policy")
    baseline = baseline_queues(policy, pools)
    if baseline is not None:
        if queues_file is not None:
            raise ValidationError(
                f"the {policy} baseline has its own queue; leave out --queues", obj="--policy"
            )
        return baseline
    if queues_file is not None:
        found = load_queues(queues_file)
        names = {q.name for q in found}
        missing = sorted({queue_name(c) for c in window.clusters} - names)
        if missing:
            raise ValidationError(
                f"no queue for the trace's clusters: {', '.join(missing)}", obj=str(queues_file)
            )
        return found
    return trace_queues(window.gpu_demand() or {c: 1.0 for c in window.clusters}, pools)
