"""`gpufleet_evictions_total` in the Kubernetes world: one count per run ended, in the words the
embedded world uses (`api.evictions`), by whoever owns the eviction (`kube.disruptions`): the
scheduler for the gangs it preempts, the operator for TrainingJob attempts."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from gpufleet.api import evictions
from gpufleet.kube.disruptions import eviction_reason
from gpufleet.kube.fleet import HEALTH_REASON, SPOT_REASON
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler

from . import test_operator
from .fakeapi import FakeApiServer
from .fixtures import gang, pod
from .test_operator import Clock, job_status, make_job, set_phase, sync
from .test_scheduler import add_node, add_pods, condition, run, sched

world = test_operator.world
__all__ = ["sched", "world"]  # fixtures shared with the scheduler's and the operator's tests

PODS = "/api/v1/namespaces/team-a/pods"


def preempted(queue: str = "team-a") -> float:
    labels = {"queue": queue, "reason": evictions.PREEMPTED}
    return REGISTRY.get_sample_value("gpufleet_evictions_total", labels) or 0.0


def urgent(gpus: int = 8) -> dict:
    labels = {"gpufleet.io/queue": "team-a"}
    return pod("urgent", gpus=gpus, priority=10_000, labels=labels, created="2026-11-29T11:30:00Z")


def test_a_preempted_gang_is_counted_once_by_the_scheduler(api: FakeApiServer, sched: KubeScheduler) -> None:
    add_node(api, "gpu-1")
    add_pods(api, gang("low", 2, gpus=4, annotations={}, priority=100))
    run(sched)
    before = preempted()
    add_pods(api, [urgent()])
    run(sched)
    # The pods say it in the embedded world's word, and the gang's run is one eviction, not two.
    assert condition(api, "low-0", "DisruptionTarget")["reason"] == evictions.PREEMPTED
    assert preempted() == before + 1
    for i in range(2):  # the kubelet stops the containers; the preemptor is bound in their place
        api.request("DELETE", f"{PODS}/low-{i}", body={"gracePeriodSeconds": 0})
    run(sched)
    assert preempted() == before + 1


def test_a_refused_eviction_counts_the_run_when_its_last_member_goes(
    api: FakeApiServer, sched: KubeScheduler
) -> None:
    add_node(api, "gpu-1")
    add_pods(api, gang("low", 2, gpus=4, annotations={}, priority=1))
    run(sched)
    before = preempted()
    api.blocked_evictions.add(("team-a", "low-1"))
    add_pods(api, [urgent()])
    run(sched)
    pods = api.objects["/v1/pods"]
    assert pods[("team-a", "low-0")]["metadata"].get("deletionTimestamp")
    assert preempted() == before  # low-1 still runs: a disruption budget keeps it
    api.blocked_evictions.clear()
    run(sched)
    assert pods[("team-a", "low-1")]["metadata"].get("deletionTimestamp")
    assert preempted() == before + 1
    run(sched)
    assert preempted() == before + 1


def test_a_preempted_training_job_is_counted_by_the_operator_alone(
    api: FakeApiServer, world: tuple[Operator, KubeScheduler, Clock]
) -> None:
    op, sched, _ = world
    make_job(api, replicas=4)  # every GPU of the four nodes
    sync(op)
    run(sched)
    for i in range(4):
        set_phase(api, f"llm-0-{i}", "Running")
    sync(op)
    before = preempted()
    add_pods(api, [urgent()])
    run(sched)
    assert preempted() == before  # the attempt has not ended yet: the operator ends it
    sync(op)
    assert job_status(api)["restarts"] == 1
    assert preempted() == before + 1
    sync(op)
    run(sched)
    assert preempted() == before + 1


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (evictions.PREEMPTED, evictions.PREEMPTED),
        ("PreemptedByGpufleet", evictions.PREEMPTED),  # a scheduler from before the shared words
        ("PreemptionByScheduler", evictions.PREEMPTED),  # kube-scheduler preempting one of ours
        (SPOT_REASON, evictions.SPOT_INTERRUPTION),
        (HEALTH_REASON, evictions.NODE_UNHEALTHY),
        ("DeletionByTaintManager", "DeletionByTaintManager"),  # Kubernetes' own, no word of ours
    ],
)
def test_disruption_reasons_are_read_in_the_shared_words(written: str, read: str) -> None:
    assert eviction_reason(written) == read
