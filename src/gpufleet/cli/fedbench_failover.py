"""`gpufleet bench federation --failover`: a worker cluster lost with its running work, on the twin.

Three worker planes on the digital twin and a manager plane (`cli.fedtwin`): `w1`, the cheapest, has
one 8-GPU host per workload, so the dispatcher sends it all of them; `w2` and `w3` are dearer and
together have room for all. `workloads` single-host TrainingJobs are submitted in ten batches a
second apart, each checkpointing at its own interval (60 to 300 s by default, so their checkpoints
fall at different moments). Once all have run for `run_seconds`, `w1` is partitioned from the
other planes (both ways): its twin and controllers go on, and its worker agent must fence its jobs
when its lease lapses; the manager takes them back after lease and grace and dispatches them to `w2`
and `w3`.

Measured, all from the twins' pod records and training runs, not from what the control planes say:

- the seconds from `w1`'s lease expiry (the manager's view: its last heartbeat plus its lease) until
  every workload runs again in `w2` or `w3` (target 60 s);
- jobs seen running in two clusters at once, checked after every plane's step (target 0);
- per workload, the work lost: the progress it had made in `w1` when it stopped there, less the step
  it resumed from elsewhere, against its checkpoint interval (target: at most one interval); the
  manager's own count (`status.lostGpuSeconds`) beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api import load_objects
from gpufleet.api.cluster import Cluster
from gpufleet.api.resource import Resource
from gpufleet.api.training import TrainingJob
from gpufleet.cli.fedtwin import TwinFederation, twin_federation
from gpufleet.twin.twin import Twin

MODEL = "H100-80GB"
NAMESPACE = "team"
TARGET_RECOVERY_SECONDS = 60.0
BATCHES = 10


def pool(nodes: int) -> list[Resource]:
    return load_objects(f"""
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: h100}}
spec: {{gpuModel: {MODEL}, gpusPerNode: 8, nodes: {nodes}}}
""")


def queue(gpus: int) -> list[Resource]:
    return load_objects(f"""
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {{name: {NAMESPACE}}}
spec: {{quotas: {{{MODEL}: {{nominal: {gpus}}}}}}}
""")


def interval_of(index: int, shortest: float, longest: float) -> float:
    """Checkpoint intervals spread evenly over [shortest, longest] (nine values)."""
    return shortest + (longest - shortest) * (index % 9) / 8


def training_job(index: int, interval: float, *, bucket: bool) -> TrainingJob:
    uri = f", uri: s3://ckpt/job-{index}" if bucket else ""
    job = load_objects(f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: job-{index}, namespace: {NAMESPACE}}}
spec:
  queue: {NAMESPACE}
  replicas: 1
  worker: {{gpus: 8, gpuModel: {MODEL}}}
  checkpoint: {{intervalSeconds: {interval}{uri}}}
  restartPolicy: {{maxRestarts: 100, backoffSeconds: 0}}
  durationSeconds: 864000
""")[0]
    assert isinstance(job, TrainingJob)
    return job


def progress_of(twin: Twin, job: str, now: float) -> float | None:
    """The work the twin's run of `job` has done by `now` (None: it runs no such job)."""
    run = twin.runs.get((NAMESPACE, job))
    if run is None or run.running == 0:
        return None
    return run.progress + (now - run.updated) * run.rate


@dataclass
class Watch:
    """What the checks see after every plane's step."""

    fed: TwinFederation
    lost: str
    twice: set[str] = field(default_factory=set)
    max_clusters_at_once: int = 0
    last_progress: dict[str, float] = field(default_factory=dict)
    """Per job, its progress in the lost cluster when last seen running there."""
    resumed_from: dict[str, float] = field(default_factory=dict)
    """Per job, the progress its first run elsewhere started from."""
    elsewhere: set[str] = field(default_factory=set)

    def check(self) -> None:
        now = self.fed.clock.now()
        holders: dict[str, int] = {}
        for name in self.fed.workers:
            for job in self.fed.running_jobs(name):
                holders[job] = holders.get(job, 0) + 1
        if holders:
            self.max_clusters_at_once = max(self.max_clusters_at_once, max(holders.values()))
        self.twice.update(job for job, count in holders.items() if count > 1)
        lost_twin = self.fed.workers[self.lost].twin
        assert lost_twin is not None
        for job in self.fed.running_jobs(self.lost):
            done = progress_of(lost_twin, job, now)
            if done is not None:
                self.last_progress[job] = done
        for name, plane in self.fed.workers.items():
            if name == self.lost or plane.twin is None:
                continue
            for job in self.fed.running_jobs(name) - self.elsewhere:
                run = plane.twin.runs[(NAMESPACE, job)]
                self.resumed_from[job] = run.progress - (now - run.updated) * run.rate
                self.elsewhere.add(job)


def run(
    *,
    workloads: int = 500,
    run_seconds: float = 150.0,
    shortest_checkpoint: float = 60.0,
    longest_checkpoint: float = 300.0,
    lease_seconds: float = 30.0,
    grace_seconds: float = 10.0,
    heartbeat_seconds: float = 5.0,
    horizon_seconds: float = 300.0,
    bucket: bool = True,
) -> dict[str, Any]:
    """The figures of one run (see the module docstring); `horizon_seconds` after the lease expiry it
    gives up waiting for the work to run again."""
    wall, cpu = time.perf_counter(), time.process_time()
    spare = -(-workloads * 3 // 5)  # 60% each: room for all in the two spares, and some left over
    workers = {"w1": (pool(workloads), 1.0), "w2": (pool(spare), 2.0), "w3": (pool(spare), 2.0)}
    intervals = {
        f"job-{i}": interval_of(i, shortest_checkpoint, longest_checkpoint) for i in range(workloads)
    }
    with twin_federation(
        workers,
        queue(8 * (workloads + 2 * spare)),
        model=MODEL,
        lease_seconds=lease_seconds,
        heartbeat_seconds=heartbeat_seconds,
        grace_seconds=grace_seconds,
    ) as fed:
        watch = Watch(fed, "w1")
        fed.checks.append(watch.check)
        fed.advance(heartbeat_seconds)  # every worker reports once: all Ready
        for batch in range(BATCHES):
            jobs = [
                training_job(i, intervals[f"job-{i}"], bucket=bucket)
                for i in range(batch, workloads, BATCHES)
            ]
            fed.manager.store.apply_many(jobs)
            fed.advance()
        limit = fed.clock.now() + 120.0
        while len(fed.running_jobs("w1")) < workloads and fed.clock.now() < limit:
            fed.advance()
        started_in_w1 = len(fed.running_jobs("w1"))
        for _ in range(int(run_seconds)):
            fed.advance()
        cut_at = fed.clock.now()
        fed.workers["w1"].link.cut = True
        lease_end = fed.manager.store.get(Cluster, "w1").status.lease_end()
        assert lease_end is not None
        all_again: float | None = None
        while fed.clock.now() < lease_end + horizon_seconds:
            fed.advance()
            if len(watch.elsewhere) == workloads and not fed.running_jobs("w1"):
                all_again = fed.clock.now()
                break
        fenced_at = fed.clock.now()
        managers = {job.name: job for job in fed.manager.store.list(TrainingJob)}
    lost = {
        job: watch.last_progress[job] - watch.resumed_from[job]
        for job in watch.elsewhere
        if job in watch.last_progress
    }
    over = sorted(job for job, seconds in lost.items() if seconds > intervals[job] + 1e-6)
    counted = [managers[job].status.lost_gpu_seconds / 8 for job in watch.elsewhere if job in managers]
    recovery = None if all_again is None else round(all_again - lease_end, 1)
    return {
        "workloads": workloads,
        "started_in_lost_cluster": started_in_w1,
        "lease_seconds": lease_seconds,
        "grace_seconds": grace_seconds,
        "partitioned_after_lease_start_s": round(cut_at - (lease_end - lease_seconds), 1),
        "running_again_elsewhere": len(watch.elsewhere),
        "seconds_to_all_running_again": recovery,
        "ran_in_two_clusters": len(watch.twice),
        "max_clusters_running_one_job": watch.max_clusters_at_once,
        "checkpoint_interval_s": [shortest_checkpoint, longest_checkpoint],
        "checkpoints_in_shared_bucket": bucket,
        "lost_work_max_s": round(max(lost.values(), default=0.0), 1),
        "lost_work_mean_s": round(sum(lost.values()) / len(lost), 1) if lost else 0.0,
        "lost_over_one_interval": len(over),
        "lost_over_one_interval_jobs": over[:10],
        "manager_counted_lost_max_s": round(max(counted, default=0.0), 1),
        "fleet_seconds": round(fenced_at - cut_at, 1),
        "wall_seconds": round(time.perf_counter() - wall, 1),
        "cpu_seconds": round(time.process_time() - cpu, 1),
        "target_recovery_met": recovery is not None and recovery <= TARGET_RECOVERY_SECONDS,
        "target_never_twice_met": not watch.twice,
        "target_lost_work_met": not over and len(lost) == workloads,
    }
