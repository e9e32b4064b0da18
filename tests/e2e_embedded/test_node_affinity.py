"""Required node affinity in the embedded world: a TrainingJob's workers run only on nodes it accepts."""

from __future__ import annotations

import pytest

from gpufleet.api.errors import ValidationError

from .conftest import World

POOLS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: near}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, capacityType: spot}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: far}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2}
"""

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  worker:
    gpus: 8
    nodeAffinity:
      nodeSelectorTerms:
        - {term}
  durationSeconds: 600
"""

NOT_SPOT = "matchExpressions: [{key: gpufleet.io/capacity-type, operator: NotIn, values: [spot]}]"


def job(name: str, term: str, replicas: int = 1) -> str:
    return JOB.format(name=name, term=term, replicas=replicas)


def nodes_of(world: World, name: str) -> list[str]:
    pods = [p for p in world.store.list("Pod") if p.spec.workload == f"job-{name}"]
    return sorted(p.spec.node_name or "" for p in pods)


def test_a_jobs_workers_run_only_on_nodes_its_node_affinity_accepts(world: World) -> None:
    world.apply(POOLS)
    world.runtime.run_for(5)
    # By label: not on spot capacity, though the spot pool sorts first and is as empty.
    world.apply(job("on-demand", NOT_SPOT, replicas=2))
    world.runtime.run_for(30)
    assert world.get("TrainingJob", "on-demand", "default").status.phase == "Running"
    assert nodes_of(world, "on-demand") == ["far-0", "far-1"]

    # By name (matchFields metadata.name): far-1 only, which is taken; the job waits and says why, though
    # both spot nodes are empty.
    world.apply(job("pinned", "matchFields: [{key: metadata.name, operator: In, values: [far-1]}]"))
    world.runtime.run_for(30)
    pinned = world.get("TrainingJob", "pinned", "default")
    assert pinned.status.phase == "Pending", pinned.status
    reason = pinned.status.pending_reason
    assert reason is not None and reason.type == "NoFit", reason
    assert "3 NodeAffinity, 1 InsufficientGPU" in reason.message, reason.message
    assert nodes_of(world, "pinned") == []


def test_a_malformed_node_affinity_is_refused_with_the_field_named(world: World) -> None:
    bad = "matchExpressions: [{key: gen, operator: Gt, values: [four]}]"
    where = (
        r"TrainingJob default/llm: field spec\.worker\.nodeAffinity\.nodeSelectorTerms\[0\]"
        r"\.matchExpressions\[0\]\.values\[0\]: must be an integer"
    )
    with pytest.raises(ValidationError, match=where):
        world.apply(job("llm", bad))
