"""An InferenceService's cost: its placed replicas' GPU-hours as the integral its status keeps (the
replica count's history), priced by `api.accounting`, as the operator writes it and the console shows it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient

from gpufleet.api.accounting import service_gpu_hours, service_records
from gpufleet.kube.console import KubeConsoleSource
from gpufleet.kube.console_events import KubeEvents
from gpufleet.kube.operator import Operator
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.console.standalone import console_app

from .fakeapi import FakeApiServer
from .test_inference import KEY, make_service, replicas, status, sync, world
from .test_scheduler import run

__all__ = ["world"]  # the fixture, used by name
HOUR = 3600.0


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_replica_gpu_hours_count_placed_replicas_and_time_alone_writes_nothing(
    api: FakeApiServer, world, tmp_path: Path
) -> None:
    clock, sched = world
    start = clock.now = float(int(clock.now))
    make_service(api, replicas={"min": 2, "max": 4})  # 1 GPU each
    op = Operator(api, clock=clock, nodes=False)
    sync(op)
    assert len(replicas(api)) == 2 and status(api)["placedGpus"] == 0  # made, not yet placed
    run(sched)
    sync(op)
    assert (status(api)["placedGpus"], status(api)["gpuHours"]) == (2.0, 0.0)
    version = api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]["metadata"]["resourceVersion"]
    clock.now += HOUR
    sync(op)
    stored = api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]
    assert stored["metadata"]["resourceVersion"] == version  # an hour passing is no write
    assert service_gpu_hours(status(api), _at(clock.now)) == 2.0  # but is read up to now
    # Suspended after 90 minutes: the replicas go, the hours stop.
    clock.now += HOUR / 2
    api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]["spec"]["suspend"] = True
    sync(op)
    assert replicas(api) == {}
    assert (status(api)["placedGpus"], status(api)["gpuHours"]) == (0.0, 3.0)
    assert service_gpu_hours(status(api), _at(start + 10 * HOUR)) == 3.0
    pool = {
        "metadata": {"name": "h100"},
        "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8, "pricePerGPUHour": 2.5},
    }
    service = api.objects["gpufleet.io/v1alpha1/inferenceservices"][KEY]
    (record,) = service_records([service], [], [], [pool], _at(clock.now))
    assert (record.gpu_hours, record.cost, record.pool, record.queue) == (3.0, 7.5, "h100", "team-a")
    # The console's cost page shows it, priced the same.
    api.put(
        "/apis/gpufleet.io/v1alpha1/gpupools",
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": pool["metadata"],
            # every node, so the nodes its replicas were on (still terminating) are priced
            "spec": {**pool["spec"], "nodeSelector": {"kubernetes.io/os": "linux"}},
        },
    )
    tokens = TokenRegistry(tmp_path)
    client = TestClient(console_app(KubeConsoleSource(api), tokens, KubeEvents(api)))
    view = client.get("/v1/console", headers={"Authorization": f"Bearer {tokens.admin_token}"}).json()
    (row,) = view["cost"]["services"]
    assert (row["name"], row["gpuHours"], row["cost"], row["gpus"]) == ("chat", 3.0, 7.5, 0.0)


def test_a_pass_on_a_copy_that_does_not_show_the_last_write_yet_counts_on_from_that_write(
    api: FakeApiServer, world
) -> None:
    clock, sched = world
    clock.now = float(int(clock.now))
    make_service(api, replicas={"min": 2, "max": 4})
    op = Operator(api, clock=clock, nodes=False)
    sync(op)
    run(sched)
    clock.now += 600
    sync(op)  # both placed: 2 GPUs from here
    assert status(api)["placedGpus"] == 2.0
    # An hour on, one replica's pod is gone: the operator sees that before its informer shows the
    # status it wrote (its copy still says no GPU was held).
    clock.now += HOUR
    del api.objects["/v1/pods"][("team-a", "chat-1")]
    op.replicas.relist()
    op.mark("InferenceService", "team-a/chat")
    op.reconcile_once()
    assert (status(api)["placedGpus"], status(api)["gpuHours"]) == (1.0, 2.0)
