"""Every pod is placed under the policy of its workload class: its gpufleet owner's, else its label's.

By default training and batch pack (fgd+) and inference spreads, so two one-GPU pods land on one node
or on two: what a user of `--placement-class` sees."""

from __future__ import annotations

import pytest

from gpufleet.kube import pods as kube_pods
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.scheduler.config import SchedulerConfig

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_inference import make_service, replicas
from .test_inference import sync as sync_services
from .test_operator import Clock, make_job
from .test_operator import sync as sync_jobs
from .test_scheduler import add_node, add_pods, add_queues, bound, condition, run

CLASS = "gpufleet.io/workload-class"


def scheduler(api: FakeApiServer, **by_class: str) -> KubeScheduler:
    add_queues(api, "default", "team-a")
    for name in ("gpu-0", "gpu-1"):
        add_node(api, name)
    config = SchedulerConfig(placement_by_class=by_class)
    return KubeScheduler(api, scheduler=config, clock=Clock(), bind_workers=0)


def class_of_workload(pods: list[dict]) -> str:
    (group,) = kube_pods.group_pods(pods, KubeConfig()).values()
    return kube_pods.workload(group, KubeConfig(), {}).workload_class


@pytest.mark.parametrize(
    ("by_class", "nodes_used"),
    [({}, 2), ({"inference": "bestfit"}, 1), ({"batch": "spread", "inference": "bestfit"}, 1)],
)
def test_an_inference_services_replicas_follow_the_inference_policy(
    api: FakeApiServer, by_class: dict[str, str], nodes_used: int
) -> None:
    sched = scheduler(api, **by_class)
    make_service(api, replicas={"min": 2, "max": 2})
    sync_services(Operator(api, clock=Clock(), nodes=False))
    assert set(replicas(api)) == {"chat-0", "chat-1"}
    run(sched)
    placed = bound(api)
    assert set(placed) == {"chat-0", "chat-1"}
    assert len(set(placed.values())) == nodes_used


@pytest.mark.parametrize(("labels", "nodes_used"), [({CLASS: "inference"}, 2), ({}, 1)])
def test_plain_pods_follow_their_labelled_class_else_batch(
    api: FakeApiServer, labels: dict[str, str], nodes_used: int
) -> None:
    sched = scheduler(api)
    add_pods(api, [pod("a", labels=labels), pod("b", labels=labels)])
    run(sched)
    placed = bound(api)
    assert set(placed) == {"a", "b"}
    assert len(set(placed.values())) == nodes_used


def test_a_training_jobs_workers_are_training(api: FakeApiServer) -> None:
    add_queues(api, "team-a")
    make_job(api)
    sync_jobs(Operator(api, clock=Clock()))
    workers = [p for (ns, _), p in api.objects["/v1/pods"].items() if ns == "team-a"]
    assert len(workers) == 2
    assert class_of_workload(workers) == "training"


def test_the_owner_decides_over_the_label_and_only_a_gpufleet_owner_counts() -> None:
    owned = pod("chat-0", labels={CLASS: "batch"})
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "gpufleet.io/v1alpha1", "kind": "InferenceService", "name": "chat", "controller": True}
    ]
    assert class_of_workload([owned]) == "inference"
    # A Job's pods (or anything of another API group) say their class with the label.
    job_pod = pod("etl-x7k2p", labels={CLASS: "training"})
    job_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "etl", "controller": True}
    ]
    assert class_of_workload([job_pod]) == "training"
    foreign = pod("lookalike")
    foreign["metadata"]["ownerReferences"] = [
        {"apiVersion": "example.com/v1", "kind": "InferenceService", "name": "chat", "controller": True}
    ]
    assert class_of_workload([foreign]) == "batch"


def test_the_class_may_be_an_annotation() -> None:
    assert class_of_workload([pod("p", annotations={CLASS: "inference"})]) == "inference"
    assert class_of_workload([pod("q")]) == "batch"


def test_an_unknown_class_is_refused_naming_the_pod_and_the_label(api: FakeApiServer) -> None:
    sched = scheduler(api)
    add_pods(api, [pod("typo", labels={CLASS: "inferense"}), pod("fine")])
    run(sched)
    assert set(bound(api)) == {"fine"}
    why = condition(api, "typo", "PodScheduled")
    assert why is not None and why["status"] == "False"
    message = why["message"]
    assert message.startswith("InvalidRequest"), message
    assert "Pod team-a/typo" in message and f"metadata.labels[{CLASS}]" in message
    assert "'inferense'" in message and "inference" in message
