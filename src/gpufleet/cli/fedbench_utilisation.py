"""`gpufleet bench federation --utilisation`: one job stream on 3 clusters under a manager, and on one
cluster of the same total size, on the twin.

The stream is seeded: TrainingJobs of 1, 2 or 4 GPUs, one host (8), and gangs of 2 and 4 hosts,
arriving as a Poisson process at `load` times what the fleet can run (so a queue forms and
fragmentation costs), each computing an exponential time (`mean_seconds` on average). The federated
run submits them to the manager of three equal, equally priced worker clusters (`cli.fedtwin`:
dispatch, leases, the workers' own schedulers); the single run submits them to one cluster with the
nodes of all three. Utilisation is the GPUs held by the twins' pods over the fleet's GPUs, sampled
every second and averaged while jobs arrive (the stream's window; the drain at its end says nothing
about placement). Target: the federation within 2 points of the single cluster.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any

from gpufleet.api import load_objects
from gpufleet.api.errors import NotFoundError
from gpufleet.api.resource import Resource
from gpufleet.api.training import TrainingJob
from gpufleet.cli.fedbench_failover import MODEL, NAMESPACE, pool, queue
from gpufleet.cli.fedtwin import TwinFederation, twin_federation
from gpufleet.store.protocol import ObjectRef, Store

SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8))
"""(workers, GPUs per worker) of the stream's jobs ..."""
WEIGHTS = (0.2, 0.15, 0.15, 0.25, 0.15, 0.1)
"""... and how often each comes."""
TARGET_POINTS = 2.0


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    """Seconds after the stream starts."""
    name: str
    workers: int
    gpus: int
    duration: float


def stream(jobs: int, gpus: int, *, load: float, mean_seconds: float, seed: int) -> list[Arrival]:
    """`jobs` arrivals that ask, on average, `load` times the `gpus` of the fleet."""
    rng = random.Random(seed)
    mean_gpus = sum(w * g * p for (w, g), p in zip(SHAPES, WEIGHTS, strict=True))
    rate = load * gpus / (mean_gpus * mean_seconds)
    out: list[Arrival] = []
    at = 0.0
    for i in range(jobs):
        at += rng.expovariate(rate)
        workers, per = rng.choices(SHAPES, WEIGHTS)[0]
        duration = min(max(rng.expovariate(1 / mean_seconds), 10.0), 5 * mean_seconds)
        out.append(Arrival(round(at), f"job-{i}", workers, per, round(duration)))
    return out


def training_job(arrival: Arrival) -> TrainingJob:
    job = load_objects(f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {arrival.name}, namespace: {NAMESPACE}}}
spec:
  queue: {NAMESPACE}
  replicas: {arrival.workers}
  worker: {{gpus: {arrival.gpus}, gpuModel: {MODEL}}}
  durationSeconds: {arrival.duration}
""")[0]
    assert isinstance(job, TrainingJob)
    return job


def held_gpus(fed: TwinFederation) -> int:
    """GPUs held by the pods of every worker's twin (bound and not ended)."""
    return sum(
        len(pod.spec.gpus)
        for plane in fed.workers.values()
        if plane.twin is not None
        for pod in plane.twin.pods.values()
        if not pod.terminated
    )


class Reaper:
    """Deletes the stream's jobs once they have succeeded (the manager then deletes their copies), as
    the job simulator does: a store that keeps every finished job makes each pass list them all."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cursor = store.resource_version

    def reap(self) -> None:
        events = self.store.events_since(self.cursor, kinds=("TrainingJob",))
        if not events:
            return
        self.cursor = str(events[-1].resource_version)
        done = {
            ObjectRef("TrainingJob", e.object.name, e.object.namespace)
            for e in events
            if e.type != "DELETED"
            and isinstance(e.object, TrainingJob)
            and e.object.status.phase == "Succeeded"
        }
        with contextlib.suppress(NotFoundError):
            self.store.delete_many(sorted(done, key=lambda ref: ref.name))


def drive(fed: TwinFederation, arrivals: list[Arrival], submit_to: str, gpus: int) -> dict[str, float]:
    """Submits the stream on time and samples the GPUs held each second until its last arrival."""
    store = fed.manager.store if submit_to == "manager" else fed.workers[submit_to].store
    reaper = Reaper(store)
    fed.advance(5.0)  # every worker has reported once
    start = fed.clock.now()
    samples: list[int] = []
    next_job = 0
    end = arrivals[-1].at if arrivals else 0.0
    while fed.clock.now() - start <= end:
        due: list[Resource] = []
        while next_job < len(arrivals) and start + arrivals[next_job].at <= fed.clock.now():
            due.append(training_job(arrivals[next_job]))
            next_job += 1
        if due:
            store.apply_many(due)
        fed.advance()
        samples.append(held_gpus(fed))
        reaper.reap()
    mean = sum(samples) / len(samples) if samples else 0.0
    return {"utilisation_pct": round(100 * mean / gpus, 2), "peak_gpus_held": max(samples, default=0)}


def run(
    *,
    clusters: int = 3,
    nodes: int = 16,
    jobs: int = 400,
    load: float = 1.2,
    mean_seconds: float = 180.0,
    seed: int = 0,
) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    gpus = clusters * nodes * 8
    arrivals = stream(jobs, gpus, load=load, mean_seconds=mean_seconds, seed=seed)
    quota = queue(gpus)
    workers = {f"w{i + 1}": (pool(nodes), 3.0) for i in range(clusters)}
    with twin_federation(workers, quota, model=MODEL) as fed:
        federated = drive(fed, arrivals, "manager", gpus)
    with twin_federation({"one": ([*pool(clusters * nodes), *quota], 3.0)}, [], model=MODEL) as fed:
        single = drive(fed, arrivals, "one", gpus)
    gap = round(single["utilisation_pct"] - federated["utilisation_pct"], 2)
    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "gpus": gpus,
        "jobs": jobs,
        "load": load,
        "mean_job_seconds": mean_seconds,
        "stream_seconds": arrivals[-1].at if arrivals else 0,
        "federated_utilisation_pct": federated["utilisation_pct"],
        "single_cluster_utilisation_pct": single["utilisation_pct"],
        "gap_points": gap,
        "wall_seconds": round(time.perf_counter() - wall, 1),
        "cpu_seconds": round(time.process_time() - cpu, 1),
        "target_met": gap <= TARGET_POINTS,
    }
