"""The federation on the twin (`cli.fedtwin`), as the benchmarks drive it: a job submitted to the
manager runs in a worker, and work waiting for its queue's quota starts within a second of the job
that held it ending in the worker (the manager's pass that sees the end hands the quota on)."""

from __future__ import annotations

from gpufleet.api import load_objects
from gpufleet.cli.fedbench_failover import MODEL, pool, queue
from gpufleet.cli.fedtwin import twin_federation

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: team}}
spec:
  queue: team
  replicas: 1
  worker: {{gpus: 8, gpuModel: H100-80GB}}
  durationSeconds: 20
"""


def test_a_job_that_ends_hands_its_quota_to_the_next_within_a_second() -> None:
    # Room for two hosts, quota for one: the second job waits for the first's quota.
    with twin_federation({"w1": (pool(2), 1.0)}, queue(8), model=MODEL) as fed:
        fed.advance(5.0)
        fed.manager.store.apply_many([*load_objects(JOB.format(name="first"))])
        fed.advance()
        fed.manager.store.apply_many([*load_objects(JOB.format(name="second"))])
        seen: dict[str, list[float]] = {"first": [], "second": []}
        for _ in range(40):
            fed.advance()
            for job in fed.running_jobs("w1"):
                seen[job].append(fed.clock.now())
        assert seen["first"] and seen["second"], seen
        first_ended = seen["first"][-1] + 1
        assert seen["second"][0] - first_ended <= 1.0, "dispatched by the pass that saw the first end"
        assert not set(seen["first"]) & set(seen["second"]), "never both at once: quota for one"
