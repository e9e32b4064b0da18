"""The kinds accept ARCHITECTURE.md's YAML contract and apply its defaults."""

from __future__ import annotations

from gpufleet.api import (
    Checkpoint,
    GPUPool,
    InferenceService,
    ModelVersion,
    ObjectMeta,
    PodRequest,
    Queue,
    TrainingJob,
    TrainingJobSpec,
    load_objects,
    priority_value,
)


def test_contract_yaml_loads_every_kind(contract_yaml: str) -> None:
    pool, queue, job, service, checkpoint, model = load_objects(contract_yaml)
    assert isinstance(pool, GPUPool) and pool.spec.price_per_gpu_hour == 3.0
    assert pool.spec.sharing.mode == "timeSlicing" and pool.spec.autoscaling is not None
    assert pool.metadata.namespace is None  # pools are cluster-wide
    assert isinstance(queue, Queue) and queue.spec.quotas["H100-80GB"].borrowing_limit == 32
    assert isinstance(job, TrainingJob) and job.key == "team-a/llm-pretrain"
    assert job.spec.worker.total_gpu_milli == 8000 and job.spec.worker.memory_mib == 256 * 1024
    assert job.spec.worker.cpu_milli == 32000 and job.spec.worker.gpu_models == ("H100-80GB",)
    assert not job.spec.elastic and job.spec.min_count == 4
    assert isinstance(service, InferenceService) and service.spec.autoscaling.target_latency_p99_ms == 300
    assert isinstance(checkpoint, Checkpoint) and checkpoint.status.phase == "Complete"
    assert isinstance(model, ModelVersion) and model.spec.source.checkpoint == "llm-pretrain-1000"


def test_namespaced_kinds_default_to_the_default_namespace() -> None:
    job = TrainingJob(
        metadata=ObjectMeta(name="j"), spec=TrainingJobSpec(replicas=1, worker=PodRequest(gpus=1))
    )
    assert job.metadata.namespace == "default"
    assert job.describe() == "TrainingJob default/j"


def test_defaults_of_a_minimal_job() -> None:
    (job,) = load_objects(
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\n"
        "spec: {replicas: 2, minReplicas: 1, worker: {gpuMilli: 500}}\n"
    )
    assert isinstance(job, TrainingJob)
    assert job.spec.queue == "default" and job.spec.preemptible is True
    assert job.spec.elastic and job.spec.min_count == 1
    assert job.spec.worker.total_gpu_milli == 500
    assert job.status.phase == "Pending" and job.status.restarts == 0 and job.status.conditions == []


def test_gpu_pool_defaults_one_nvlink_domain_of_all_gpus() -> None:
    (pool,) = load_objects(
        "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {name: p}\n"
        "spec: {gpuModel: A100-40GB, gpusPerNode: 4}\n"
    )
    assert isinstance(pool, GPUPool)
    assert pool.spec.domains == [[0, 1, 2, 3]] and pool.spec.sharing.mode == "exclusive"
    assert pool.spec.capacity_type == "on-demand"


def test_mig_layout_accepts_integer_gpu_indices_from_yaml() -> None:
    (pool,) = load_objects(
        "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {name: p}\n"
        "spec: {gpuModel: A100-40GB, gpusPerNode: 2, sharing: {mig: {0: [3g.20gb, 1g.5gb+me]}}}\n"
    )
    assert isinstance(pool, GPUPool)
    assert pool.spec.sharing.mig == {"0": ["3g.20gb", "1g.5gb+me"]}


def test_priority_values_follow_the_table() -> None:
    assert priority_value("system-critical") == 1_000_000
    assert priority_value("development") == 100
    assert priority_value(None) == 0
    assert priority_value("gold", {"gold": 5}) == 5


def test_fractional_cpu_is_written_back_as_a_quantity_string() -> None:
    request = PodRequest.model_validate({"cpu": 1.5, "memory": 2048})
    assert request.cpu == "1.5" and request.cpu_milli == 1500
    assert request.memory == 2048 and request.memory_mib == 1
