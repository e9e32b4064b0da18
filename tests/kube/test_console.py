"""The web console of a cluster (`gpufleet kube console`): the page's JSON and events, read through the
API server, in the shape `gpufleet up` serves; what it shows is what the scheduler decided there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.reasons import pending_lines
from gpufleet.kube.console import KubeConsoleSource
from gpufleet.kube.console_events import KubeEvents
from gpufleet.kube.operator import Operator
from gpufleet.kube.scheduler import KubeScheduler
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.console.standalone import console_app

from .fakeapi import FakeApiServer
from .fixtures import pod
from .test_pool_idle import settle
from .test_scheduler import add_node, add_pods, add_queues, run

GROUP = "/apis/gpufleet.io/v1alpha1"


@pytest.fixture
def console(api: FakeApiServer, tmp_path: Path) -> Iterator[TestClient]:
    tokens = TokenRegistry(tmp_path)
    app = console_app(KubeConsoleSource(api), tokens, KubeEvents(api))
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
        yield client


def _cluster(api: FakeApiServer) -> KubeScheduler:
    """Two GPU nodes of one pool in rack r1 (one with a failed GPU), a CPU node; the scheduler binds a
    pod, another scheduler's pod holds GPUs without saying which, and a pod too big waits."""
    add_queues(api, "default", "team-a")
    pool = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": "h100"},
        "spec": {"gpuModel": "H100-80GB", "gpusPerNode": 8, "pricePerGPUHour": 2.5,
                 "nodeSelector": {"pool": "h100"}},
    }  # fmt: skip
    api.put(f"{GROUP}/gpupools", pool)
    rack = {"pool": "h100", "gpufleet.io/rack": "r1"}
    add_node(api, "gpu-1", labels=rack)
    add_node(api, "gpu-2", labels=rack, annotations={"gpufleet.io/unhealthy-gpus": "7"}, allocatable_gpus=7)
    add_node(api, "cpu-1", gpus=0)
    labels = {"gpufleet.io/queue": "team-a"}
    add_pods(api, [pod("p", gpus=8, labels=labels), pod("huge", gpus=16, labels=labels)])
    theirs = pod("theirs", gpus=2, scheduler="default-scheduler", node_name="gpu-2", phase="Running")
    add_pods(api, [theirs])
    sched = KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0)
    run(sched)
    return sched


def _by_node(view: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    (pool,) = view["map"]
    assert pool["name"] == "h100" and pool["gpuModel"] == "H100-80GB"
    (rack,) = pool["racks"]
    assert rack["name"] == "r1"
    return {node["name"]: node["gpus"] for node in rack["nodes"]}


def test_the_map_shows_the_gpus_the_scheduler_bound_the_failed_ones_and_others_pods(
    api: FakeApiServer, console: TestClient
) -> None:
    _cluster(api)
    view = console.get("/v1/console").json()
    assert view["who"] == {"admin": True, "queue": None}
    gpus = _by_node(view)  # the CPU node is not on the map
    assert set(gpus) == {"gpu-1", "gpu-2"}
    assert [g["state"] for g in gpus["gpu-1"]] == ["allocated"] * 8
    assert gpus["gpu-1"][0]["holders"] == ["p"]
    states = [g["state"] for g in gpus["gpu-2"]]
    assert states == ["allocated"] * 2 + ["idle"] * 5 + ["failed"]
    assert gpus["gpu-2"][0]["holders"] == ["theirs"]
    assert gpus["gpu-2"][7]["problem"] == "nvidia.com/gpu: 7 of 8 allocatable"


def test_a_waiting_pod_shows_the_scheduler_s_reason_in_describe_s_words(
    api: FakeApiServer, console: TestClient
) -> None:
    _cluster(api)
    (row,) = console.get("/v1/console").json()["work"]
    assert (row["kind"], row["namespace"], row["name"]) == ("Pod", "team-a", "huge")
    assert (row["queue"], row["phase"]) == ("team-a", "Pending")
    condition = next(
        c for c in api.objects["/v1/pods"][("team-a", "huge")]["status"]["conditions"]
        if c["type"] == "PodScheduled"
    )  # fmt: skip
    kind, _, message = condition["message"].partition(": ")
    assert row["pending"] == {"type": kind, "lines": pending_lines({"type": kind, "message": message})[1]}
    assert row["pending"]["type"] == "NoFit"


def test_queues_and_costs_come_from_the_queues_status_and_the_pods_on_the_pools_nodes(
    api: FakeApiServer, console: TestClient
) -> None:
    _cluster(api)
    view = console.get("/v1/console").json()
    assert {q["name"] for q in view["queues"]} == {"default", "team-a"}
    (pool,) = view["cost"]["pools"]
    assert (pool["name"], pool["allocatedGpus"], pool["costPerHour"]) == ("h100", 10.0, 25.0)
    assert pool["idleGpuHours"] is None  # no operator has counted any yet: none are made up
    per_queue = {q["name"]: (q["gpus"], q["costPerHour"]) for q in view["cost"]["queues"]}
    assert per_queue == {"team-a": (8.0, 20.0), "default": (2.0, 5.0)}
    # The operator counts the pool's idle GPUs from here on: 16 on Ready nodes (the failed one too, as
    # the embedded pool counts them), 10 held, for half an hour.
    clock = [1_900_000_000.0]
    operator = Operator(api, clock=lambda: clock[0])
    settle(operator)
    clock[0] += 1800
    settle(operator)
    (pool,) = console.get("/v1/console").json()["cost"]["pools"]
    assert (pool["idleGpuHours"], pool["idleCost"]) == (3.0, 7.5)


def test_the_cluster_s_events_are_served_as_the_page_reads_them_then_live(
    api: FakeApiServer, console: TestClient
) -> None:
    sched = _cluster(api)
    first = console.get("/v1/changes", params={"kind": "Event", "limit": 100}).json()
    reasons = {(c["object"]["spec"]["reason"], c["object"]["spec"]["involvedName"]) for c in first["items"]}
    assert ("FailedScheduling", "huge") in reasons
    event = next(c["object"] for c in first["items"] if c["object"]["spec"]["involvedName"] == "huge")
    assert event["spec"]["involvedKind"] == "Pod" and event["spec"]["type"] == "Warning"
    assert event["spec"]["source"] == "gpufleet-scheduler" and event["spec"]["time"]
    add_pods(api, [pod("later", gpus=16, labels={"gpufleet.io/queue": "team-a"})])
    run(sched)
    cursor = {"kind": "Event", "resourceVersion": first["resourceVersion"], "timeoutSeconds": 1}
    fresh = console.get("/v1/changes", params=cursor).json()
    assert {c["object"]["spec"]["involvedName"] for c in fresh["items"]} == {"later"}
    assert int(fresh["resourceVersion"]) > int(first["resourceVersion"])


def test_the_page_is_served_and_every_read_needs_the_token(console: TestClient) -> None:
    assert "gpufleet console" in console.get("/").text
    assert console.get("/console/console.js").status_code == 200
    for path in ("/v1/console", "/v1/changes?kind=Event"):
        assert console.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert console.get("/v1/changes", params={"kind": "Pod"}).status_code == 422


def test_a_cursor_the_server_compacted_away_starts_the_events_again_from_a_list(api: FakeApiServer) -> None:
    sched = _cluster(api)
    events = KubeEvents(api)
    _, cursor = events.changes(None, limit=100, wait=0)
    add_pods(api, [pod("later", gpus=16, labels={"gpufleet.io/queue": "team-a"})])
    run(sched)
    api.compact()  # the history behind the cursor is gone: the watch answers 410 Expired
    items, fresh = events.changes(cursor, limit=100, wait=1)
    assert {c["object"]["spec"]["involvedName"] for c in items} >= {"huge", "later"}
    assert int(fresh) > int(cursor)


def test_once_watching_the_view_follows_the_cluster_from_the_informers_caches(
    api: FakeApiServer, tmp_path: Path
) -> None:
    _cluster(api)
    source = KubeConsoleSource(api)
    stop = threading.Event()
    try:
        assert source.watch(stop, timeout=10)
        tokens = TokenRegistry(tmp_path)
        client = TestClient(console_app(source, tokens, KubeEvents(api)))
        client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
        listed = len(api.requests)
        assert [g["state"] for g in _by_node(client.get("/v1/console").json())["gpu-1"]][:2] == [
            "allocated"
        ] * 2
        assert len(api.requests) == listed  # read from the caches, not listed again
        note = {"metadata": {"annotations": {"gpufleet.io/unhealthy-gpus": "1"}}}
        api.request("PATCH", "/api/v1/nodes/gpu-1", body=note, content_type="application/merge-patch+json")

        def failed() -> bool:
            return _by_node(client.get("/v1/console").json())["gpu-1"][1]["state"] == "failed"

        deadline = time.monotonic() + 5
        while not failed():
            assert time.monotonic() < deadline, "the failed GPU did not reach the view"
            time.sleep(0.05)
    finally:
        stop.set()


def test_a_mig_node_s_gpus_are_mig_and_a_share_pod_s_gpu_is_shared(
    api: FakeApiServer, console: TestClient
) -> None:
    quotas = {"H100-80GB": {"nominal": 8}, "3g.40gb": {"nominal": 2}}
    queue = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": "default"},
             "spec": {"quotas": quotas}}  # fmt: skip
    api.put(f"{GROUP}/queues", queue)
    mig = {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-2g.20gb": "2", "nvidia.com/mig-1g.10gb": "4"}
    add_node(api, "m", gpus=0, extra=mig, labels={"nvidia.com/gpu.count": "2"})
    sliced = {
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
        "nvidia.com/gpu.count": "8",
    }
    add_node(api, "t", gpus=32, labels=sliced)
    add_pods(api, [pod("mp", gpus=None, resources={"nvidia.com/mig-3g.40gb": "1"}),
                   pod("sp", gpus=1, annotations={"gpufleet.io/gpu-milli": "250"})])  # fmt: skip
    run(KubeScheduler(api, clock=lambda: 1_900_000_000.0, bind_workers=0))
    (pool,) = console.get("/v1/console").json()["map"]
    gpus = {node["name"]: node["gpus"] for rack in pool["racks"] for node in rack["nodes"]}
    assert {g["state"] for g in gpus["m"]} == {"mig"} and len(gpus["m"]) == 2
    assert [g["holders"] for g in gpus["m"] if g["holders"]] == [["mp"]]
    shared = [g for g in gpus["t"] if g["state"] != "idle"]
    assert [(g["state"], g["holders"]) for g in shared] == [("shared", ["sp"])] and len(gpus["t"]) == 8
