"""Objects a careless or hostile user writes with kubectl, past the CRDs' schemas only (odd names,
extreme and odd values in any spec field of TrainingJobs, InferenceServices, Checkpoints and
ModelVersions), must never fail the Kubernetes operator or scheduler: a few rounds of both over ten
of them log no contained failure and no round raises. What gpufleet's checks refuse is said on the
object. Seeded, so a failure replays; each of these seeds met a failure before the operator read
refused objects as the user's error (a template's container as a string, an env as a mapping, a
name too long for its pods' labels)."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest

from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.kube.transport import ApiError

from .fakeapi import FakeApiServer
from .test_operator import Clock
from .test_scheduler import add_node, add_queues

PLURALS = {
    "TrainingJob": "trainingjobs",
    "InferenceService": "inferenceservices",
    "Checkpoint": "checkpoints",
    "ModelVersion": "modelversions",
}


def _world(api: FakeApiServer) -> tuple[Operator, KubeScheduler, Clock]:
    add_queues(api, "team-a", "default")
    for i in range(4):
        add_node(api, f"gpu-{i}", labels={"gpufleet.io/rack": "r1"})
    clock = Clock()
    return Operator(api, clock=clock, nodes=False), KubeScheduler(api, clock=clock, bind_workers=0), clock


def _round(op: Operator, sched: KubeScheduler, first: bool) -> None:
    for informer in (op.jobs, op.pods, op.services, op.checkpoints, op.inference, op.replicas, op.versions):
        informer.relist()
    if first:
        for obj in op.jobs.items():
            op.mark("TrainingJob", f"team-a/{obj['metadata']['name']}")
        for obj in op.inference.items():
            op.mark("InferenceService", f"team-a/{obj['metadata']['name']}")
    op.reconcile_once()
    for informer in (sched.nodes, sched.pods, sched.queues, sched.jobs):
        informer.relist()
    sched.schedule_once()


@pytest.mark.parametrize("seed", [3, 6, 7])
def test_odd_objects_written_with_kubectl_never_fail_the_operator_or_scheduler(
    seed: int, hostile_objects: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(seed)
    n = 0
    for _ in range(6):
        api = FakeApiServer()
        op, sched, clock = _world(api)
        for _ in range(10):
            n += 1
            doc = hostile_objects.mutated(rng, n, kinds=set(PLURALS))
            doc["metadata"]["namespace"] = "team-a"
            spec = doc.get("spec")
            if isinstance(spec, dict) and "queue" in spec and rng.random() < 0.7:
                spec["queue"] = "team-a"
            try:
                api.request(
                    "POST", f"/apis/gpufleet.io/v1alpha1/namespaces/team-a/{PLURALS[doc['kind']]}", body=doc
                )
            except ApiError:
                continue  # refused by its CRD's schema, as a real API server would
        with caplog.at_level(logging.ERROR):
            for index in range(6):
                _round(op, sched, first=index == 0)
                clock.now += 120
        assert sched.stats.errors == 0 and sched.kcache.failures == 0
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
