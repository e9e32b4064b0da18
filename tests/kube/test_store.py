"""KubeStore keeps the Store protocol's semantics on an API server (here the in-memory stand-in)."""

from __future__ import annotations

import pytest

from gpufleet.api import GPUPool, GPUPoolSpec, ObjectMeta, PodRequest, TrainingJob, TrainingJobSpec
from gpufleet.api.errors import ConflictError, GoneError, NotFoundError, ValidationError
from gpufleet.api.meta import Condition
from gpufleet.kube.store import KubeStore

from .fakeapi import FakeApiServer


def job(name: str, namespace: str = "team-a", *, replicas: int = 2, labels: dict[str, str] | None = None):
    return TrainingJob(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels or {}),
        spec=TrainingJobSpec(replicas=replicas, worker=PodRequest(gpus=8)),
    )


def pool(name: str) -> GPUPool:
    return GPUPool(metadata=ObjectMeta(name=name), spec=GPUPoolSpec(gpu_model="H100-80GB", gpus_per_node=8))


def test_create_goes_to_the_custom_resource_path_and_fills_in_metadata(kstore: KubeStore, api) -> None:
    created = kstore.create(job("llm"))
    assert ("POST", "/apis/gpufleet.io/v1alpha1/namespaces/team-a/trainingjobs") in api.requests
    assert created.metadata.uid and created.metadata.generation == 1 and created.metadata.resource_version
    assert kstore.get(TrainingJob, "llm", "team-a").spec.replicas == 2
    created_pool = kstore.create(pool("h100"))
    assert created_pool.metadata.namespace is None
    assert ("POST", "/apis/gpufleet.io/v1alpha1/gpupools") in api.requests


def test_server_fields_the_models_do_not_know_survive_an_update(kstore: KubeStore, api) -> None:
    created = kstore.create(job("llm"))
    raw = api.objects["gpufleet.io/v1alpha1/trainingjobs"][("team-a", "llm")]
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]
    raw["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    created.spec.replicas = 4
    updated = kstore.update(created)
    assert updated.spec.replicas == 4 and updated.metadata.generation == 2
    kept = api.objects["gpufleet.io/v1alpha1/trainingjobs"][("team-a", "llm")]["metadata"]
    assert kept["ownerReferences"][0]["name"] == "x"


def test_errors_are_gpufleets(kstore: KubeStore) -> None:
    kstore.create(job("llm"))
    with pytest.raises(ConflictError):
        kstore.create(job("llm"))
    with pytest.raises(NotFoundError, match="TrainingJob team-a/nope"):
        kstore.get(TrainingJob, "nope", "team-a")
    with pytest.raises(ValidationError):
        kstore.create(job("x").model_copy(update={"metadata": ObjectMeta(name="x", resource_version="5")}))


def test_stale_update_is_a_conflict_and_changes_nothing(kstore: KubeStore) -> None:
    first = kstore.create(job("llm"))
    second = kstore.get(TrainingJob, "llm", "team-a")
    first.spec.replicas = 3
    kstore.update(first)
    second.spec.replicas = 5
    with pytest.raises(ConflictError):
        kstore.update(second)
    assert kstore.get(TrainingJob, "llm", "team-a").spec.replicas == 3


def test_update_keeps_status_and_update_status_keeps_spec(kstore: KubeStore) -> None:
    created = kstore.create(job("llm"))
    created.status.phase = "Running"
    created.status.conditions = [Condition(type="Admitted", status="True")]
    with_status = kstore.update_status(created)
    assert with_status.status.phase == "Running" and with_status.metadata.generation == 1
    with_status.spec.replicas = 6
    with_status.status.phase = "Failed"
    updated = kstore.update(with_status)
    assert updated.status.phase == "Running" and updated.spec.replicas == 6


def test_update_without_resource_version_is_unconditional(kstore: KubeStore) -> None:
    kstore.create(job("llm"))
    blind = job("llm", replicas=7)
    assert kstore.update(blind).spec.replicas == 7


def test_finalizers_hold_a_deleted_object_until_the_last_goes(kstore: KubeStore) -> None:
    with_finalizer = job("llm")
    with_finalizer.metadata.finalizers = ["gpufleet.io/cleanup"]
    kstore.create(with_finalizer)
    held = kstore.delete(TrainingJob, "llm", "team-a")
    assert held is not None and held.metadata.deletion_timestamp is not None
    held.metadata.finalizers = []
    kstore.update(held)
    with pytest.raises(NotFoundError):
        kstore.get(TrainingJob, "llm", "team-a")
    kstore.create(job("other"))
    assert kstore.delete(TrainingJob, "other", "team-a") is None


def test_delete_with_a_stale_resource_version_is_a_conflict(kstore: KubeStore) -> None:
    created = kstore.create(job("llm"))
    kstore.update(job("llm", replicas=3))
    with pytest.raises(ConflictError):
        kstore.delete(TrainingJob, "llm", "team-a", resource_version=created.metadata.resource_version)


def test_apply_creates_then_replaces_spec_whatever_the_version(kstore: KubeStore) -> None:
    assert kstore.apply(job("llm")).spec.replicas == 2
    stale = job("llm", replicas=9)
    stale.metadata.resource_version = "1"
    assert kstore.apply(stale).spec.replicas == 9


def test_list_by_namespace_and_label_selector(kstore: KubeStore) -> None:
    kstore.create(job("a", labels={"team": "x"}))
    kstore.create(job("b", labels={"team": "y"}))
    kstore.create(job("c", namespace="team-b", labels={"team": "x"}))
    assert [j.name for j in kstore.list(TrainingJob)] == ["a", "b", "c"]
    assert [j.name for j in kstore.list(TrainingJob, namespace="team-a")] == ["a", "b"]
    assert [j.name for j in kstore.list(TrainingJob, label_selector="team=x")] == ["a", "c"]
    assert [j.name for j in kstore.list(TrainingJob, label_selector={"team": "y"})] == ["b"]
    listed = kstore.list(TrainingJob)
    assert int(listed.resource_version) >= max(int(j.metadata.resource_version) for j in listed)


def test_watch_delivers_events_in_order_and_resumes(kstore: KubeStore) -> None:
    start = kstore.resource_version
    kstore.create(job("a"))
    kstore.create(pool("p"))
    kstore.update(job("a", replicas=3))
    kstore.delete(TrainingJob, "a", "team-a")
    with kstore.watch(kinds=["TrainingJob"], since=start, timeout=0.3) as watch:
        events = list(watch)
    assert [(e.type, e.object.name) for e in events] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    with kstore.watch(kinds=["TrainingJob", "GPUPool"], since=start, timeout=0.3) as both:
        kinds = sorted(e.object.kind for e in both)
    assert kinds == ["GPUPool", "TrainingJob", "TrainingJob", "TrainingJob"]
    polled = kstore.events_since(events[0].resource_version, kinds=["TrainingJob"])
    assert [e.type for e in polled] == ["MODIFIED", "DELETED"]


def test_watch_from_a_compacted_version_is_gone(kstore: KubeStore, api: FakeApiServer) -> None:
    start = kstore.resource_version
    kstore.create(job("a"))
    api.compact()
    with pytest.raises(GoneError), kstore.watch(kinds=["TrainingJob"], since=start, timeout=1) as watch:
        list(watch)
