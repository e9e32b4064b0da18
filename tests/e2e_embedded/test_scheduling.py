"""The scheduling core inside the embedded control plane: Queue fields, reasons, wake-ups, policies."""

from __future__ import annotations

from .conftest import World

POOL = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: {name}}}
spec: {{gpuModel: {model}, gpusPerNode: 8, nodes: {nodes}}}
"""


def _job(name: str, gpus: int, *, queue: str = "default", user: str = "", seconds: int = 600) -> str:
    owner = f", user: {user}" if user else ""
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec: {{queue: {queue}{owner}, replicas: 1, worker: {{gpus: {gpus}}}, durationSeconds: {seconds}}}
"""


def _reason(world: World, job: str) -> tuple[str, str]:
    status = world.get("Workload", f"job-{job}").status
    assert status.pending_reason is not None, status
    return status.pending_reason.type, status.pending_reason.message


def _phase(world: World, job: str) -> str:
    return str(world.get("Workload", f"job-{job}").status.phase)


def test_without_a_node_of_any_model_jobs_wait_for_nodes_and_all_start_when_one_joins(world: World) -> None:
    world.apply(_job("first", 4))
    world.apply(_job("second", 4))
    world.runtime.run_for(5)
    for job in ("first", "second"):
        kind, message = _reason(world, job)
        assert kind == "NoFit", message
        assert "no node of an accepted GPU model exists" in message
    world.apply(POOL.format(name="h100", model="H100-80GB", nodes=1))
    world.runtime.run_for(5)
    assert (_phase(world, "first"), _phase(world, "second")) == ("Admitted", "Admitted")


QUEUES = """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec:
  quotas: {H100-80GB: {nominal: 16}}
  userGpuLimit: 8
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: strict}
spec:
  quotas: {H100-80GB: {nominal: 8}}
  queueingStrategy: StrictFIFO
"""


def test_queue_objects_carry_user_limit_and_strict_fifo_into_the_scheduler(world: World) -> None:
    world.apply(POOL.format(name="h100", model="H100-80GB", nodes=4))
    world.apply(QUEUES)
    world.runtime.run_for(1)
    world.apply(_job("alice-1", 8, queue="team", user="alice"))
    world.apply(_job("alice-2", 4, queue="team", user="alice"))
    world.apply(_job("bob-1", 4, queue="team", user="bob"))
    world.apply(_job("head", 8, queue="strict", seconds=1200))
    world.runtime.run_for(5)
    world.apply(_job("too-big", 8, queue="strict"))
    world.runtime.run_for(5)
    world.apply(_job("small", 2, queue="strict"))  # would fit the nodes, but not behind the head
    world.runtime.run_for(5)
    assert _phase(world, "alice-1") == "Admitted"
    assert _phase(world, "bob-1") == "Admitted"
    kind, message = _reason(world, "alice-2")
    assert kind == "QuotaExceeded" and "per-user limit 8" in message, message
    assert _phase(world, "head") == "Admitted"
    assert _reason(world, "too-big")[0] == "QuotaExceeded"
    kind, message = _reason(world, "small")
    assert kind == "Queued" and "StrictFIFO queue strict: only the head is tried" in message, message


SERVICE = """
apiVersion: gpufleet.io/v1alpha1
kind: ModelVersion
metadata: {name: chat-v1, namespace: serving}
spec: {model: chat, version: v1, uri: s3://models/chat/v1}
---
apiVersion: gpufleet.io/v1alpha1
kind: InferenceService
metadata: {name: chat, namespace: serving}
spec:
  modelVersion: chat-v1
  replicas: {min: 3, max: 3}
  replica: {gpus: 1, gpuModel: L4}
"""


def test_inference_replicas_spread_over_nodes_and_training_packs(world: World) -> None:
    from gpufleet.api.runtime import Pod

    world.apply(POOL.format(name="l4", model="L4", nodes=4))
    world.runtime.run_for(1)
    world.apply(SERVICE)
    world.apply(_job("a", 1))
    world.apply(_job("b", 1))
    world.runtime.run_for(30)
    pods = world.store.list(Pod).items
    replicas = [p.spec.node_name for p in pods if p.namespace == "serving" and p.status.phase == "Running"]
    trainers = [p.spec.node_name for p in pods if p.spec.workload in ("job-a", "job-b")]
    assert len(replicas) == 3 and len(set(replicas)) == 3, replicas
    assert len(trainers) == 2 and len(set(trainers)) == 1, trainers


TYPED_POOLS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100-od}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, capacityType: on-demand}
---
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100-spot}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, capacityType: spot}
---
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: typed}
spec:
  quotas:
    H100-80GB/on-demand: {nominal: 8}
    H100-80GB/spot: {nominal: 8}
"""


def test_capacity_typed_quotas_place_on_the_pools_of_that_type_on_demand_first(world: World) -> None:
    from gpufleet.api.runtime import Pod

    world.apply(TYPED_POOLS)
    world.runtime.run_for(1)
    world.apply(_job("first", 8, queue="typed"))
    world.runtime.run_for(5)
    world.apply(_job("second", 8, queue="typed"))
    world.runtime.run_for(5)
    world.apply(_job("third", 8, queue="typed"))
    world.runtime.run_for(5)
    pools = {
        p.spec.workload: world.get("Node", p.spec.node_name).spec.pool for p in world.store.list(Pod).items
    }
    assert pools == {"job-first": "h100-od", "job-second": "h100-spot"}
    admission = world.get("Workload", "job-second").status.admission
    assert admission.gpu_model == "H100-80GB/spot" and admission.usage == {"H100-80GB/spot": 8000}
    assert world.get("Queue", "typed").status.usage == {"H100-80GB/on-demand": 8.0, "H100-80GB/spot": 8.0}
    assert _reason(world, "third")[0] == "QuotaExceeded"
