"""`gpufleet_evictions_total` in the embedded world: a gang preempted whole is one run ended, counted
once in the shared word (`api.evictions.PREEMPTED`), the same label the Kubernetes world's scheduler
and operator use (tests/kube/test_eviction_metrics.py)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from gpufleet.api import evictions
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import OwnerRef, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore

from .test_scheduling import ready_node, run, store

__all__ = ["store"]  # the fixture shared with the scheduling controller's tests


def submit(store: SqliteStore, name: str, *, priority: int, pods: int, gpus: int) -> None:
    spec = WorkloadSpec(
        owner=OwnerRef(kind="TrainingJob", name=name),
        priority=priority,
        pod_sets=[WorkloadPodSet(count=pods, request=PodRequest(gpus=gpus))],
    )
    store.create(Workload(metadata=ObjectMeta(name=name), spec=spec))


def preempted() -> float:
    labels = {"queue": "default", "reason": evictions.PREEMPTED}
    return REGISTRY.get_sample_value("gpufleet_evictions_total", labels) or 0.0


def test_a_gang_preempted_whole_is_one_eviction_in_the_shared_word(store: SqliteStore) -> None:
    ready_node(store, "n1")
    controller = SchedulingController(store)
    submit(store, "low", priority=0, pods=2, gpus=4)
    run(store, controller)
    before = preempted()
    submit(store, "high", priority=100, pods=1, gpus=8)
    run(store, controller, now=10.0)
    low = store.get(Workload, "low")
    assert [e.reason for e in low.status.evictions] == [evictions.PREEMPTED]
    assert preempted() == before + 1  # one gang of two pods: one run ended
    run(store, controller, now=20.0)
    assert preempted() == before + 1
