"""Federation across processes: a `gpufleet up --manager` and two `gpufleet up` workers, each its own
process on a free port, joined with `gpufleet cluster join`. A TrainingJob applied to the manager runs in
the cheaper worker, in a queue the manager made there with the quota it granted, and its status shows
in the manager; neither worker's token is ever shown by the
manager's API nor written to a log; a drained cluster gets no new work; the worker's events show in
`describe` on the manager, and deleting the job there deletes it in its worker; a worker that leaves
hands its work to the other one first."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.client import PREFIX, Client
from gpufleet.federation.link import CLUSTER, MANAGED_BY

from .conftest import Plane, Result, start_plane, stop_plane

WAIT_SECONDS = 60.0


def worker_fleet(price: float) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {{name: h100}}
spec: {{gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: {price}}}
"""


MANAGER_FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec: {quotas: {H100-80GB: {nominal: 16}}}
"""


def job(name: str) -> str:
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, namespace: team}}
spec:
  queue: team
  replicas: 1
  worker: {{gpus: 8, gpuModel: H100-80GB}}
  durationSeconds: 36000
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[dict[str, Plane]]:
    planes: dict[str, Plane] = {}
    (tmp_path / "manager.yaml").write_text(MANAGER_FLEET)
    # A short grace past a lease, so the lost worker's work moves within seconds.
    args: dict[str, tuple[str, ...]] = {
        "manager": ("--manager", "--lease-grace", "2", "-f", str(tmp_path / "manager.yaml"))
    }
    for name, price in (("w1", 2.0), ("w2", 3.0)):
        (tmp_path / f"{name}.yaml").write_text(worker_fleet(price))
        args[name] = ("-f", str(tmp_path / f"{name}.yaml"))
    try:
        # The three processes start side by side: most of a start is importing.
        with ThreadPoolExecutor(len(args)) as pool:
            started = {name: pool.submit(start_plane, tmp_path / name, *a) for name, a in args.items()}
        for name, future in started.items():
            planes[name] = future.result()
        yield planes
    finally:
        for plane in planes.values():
            stop_plane(plane)


def client(plane: Plane) -> Client:
    return Client(plane.url, (plane.state / "admin-token").read_text().strip())


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def held_job(manager: Client, name: str, *, in_cluster: str | None = None) -> dict[str, Any] | None:
    """The manager's job while it runs in a cluster (in `in_cluster`, when given), else None."""
    data: dict[str, Any] = manager.get(f"{PREFIX}/namespaces/team/trainingjobs/{name}")
    held = data["metadata"].get("annotations", {}).get(CLUSTER)
    running = data["status"].get("phase") == "Running" and held is not None
    return data if running and in_cluster in (None, held) else None


def test_workers_in_their_own_processes_join_a_manager_and_run_its_jobs(
    fleet: dict[str, Plane], cli: Callable[..., Result], tmp_path: Path
) -> None:
    manager = client(fleet["manager"])
    manager_token = (fleet["manager"].state / "admin-token").read_text().strip()

    def join(name: str, lease: int) -> None:
        joined = cli(
            "cluster", "join", name, "--manager", fleet["manager"].url, "--manager-token", manager_token,
            "--lease-seconds", str(lease), "--state", str(fleet[name].state),
        )  # fmt: skip
        assert joined.code == 0, joined.err
        assert manager_token not in joined.out

    for name in ("w1", "w2"):
        join(name, 20)
    taken = cli(
        "cluster", "join", "w1", "--manager", fleet["manager"].url, "--manager-token", manager_token,
        "--state", str(fleet["w2"].state),
    )  # fmt: skip
    assert taken.code == 1 and "already joined from" in taken.err, "w2 may not take over w1's name"
    wait_for(
        "both workers' heartbeats",
        lambda: (
            all(c["status"].get("heartbeatTime") for c in manager.get(f"{PREFIX}/clusters")["items"])
            and len(manager.get(f"{PREFIX}/clusters")["items"]) == 2
        ),
    )
    cluster = manager.get(f"{PREFIX}/clusters/w1")
    assert cluster["spec"]["pricePerGPUHour"] == {"H100-80GB": 2.0}, "prices read from the worker's pools"
    assert cluster["status"]["capacity"]["H100-80GB"]["gpus"] == 16

    (tmp_path / "llm.yaml").write_text(job("llm"))
    applied = cli("apply", "-f", str(tmp_path / "llm.yaml"), "--state", str(fleet["manager"].state))
    assert applied.code == 0, applied.err
    llm = wait_for("llm running", lambda: held_job(manager, "llm"))
    assert llm["metadata"]["annotations"][CLUSTER] == "w1", "the cheaper worker"
    copy = client(fleet["w1"]).get(f"{PREFIX}/namespaces/team/trainingjobs/llm")
    assert copy["metadata"]["annotations"][MANAGED_BY] == "manager"
    assert copy["status"]["phase"] == "Running" and llm["status"]["nodes"] == copy["status"]["nodes"]
    assert client(fleet["w2"]).get(f"{PREFIX}/namespaces/team/trainingjobs")["items"] == []
    queue = client(fleet["w1"]).get(f"{PREFIX}/queues/team")
    assert queue["metadata"]["annotations"][MANAGED_BY] == "manager", "the manager made the job's queue"
    assert queue["spec"]["quotas"] == {"H100-80GB": {"nominal": 8, "borrowingLimit": 0}}

    drained = cli("cluster", "drain", "w1", "--reason", "maintenance", "--state", str(fleet["manager"].state))
    assert drained.code == 0, drained.err
    listed = cli("get", "clusters", "--state", str(fleet["manager"].state)).out.splitlines()
    assert "DRAIN" in listed[0] and "Finish" in next(line for line in listed if line.startswith("w1"))
    (tmp_path / "next.yaml").write_text(job("next"))
    assert cli("apply", "-f", str(tmp_path / "next.yaml"), "--state", str(fleet["manager"].state)).code == 0
    following = wait_for("next running", lambda: held_job(manager, "next"))
    assert following["metadata"]["annotations"][CLUSTER] == "w2", "the drained cluster takes no new work"
    assert held_job(manager, "llm") is not None, "what runs in the drained cluster goes on"

    # The queue's 16 GPUs span both workers: a third job waits on the quota though w2 has room.
    (tmp_path / "over.yaml").write_text(job("over"))
    assert cli("apply", "-f", str(tmp_path / "over.yaml"), "--state", str(fleet["manager"].state)).code == 0
    over = f"{PREFIX}/namespaces/team/trainingjobs/over"
    wait_for("over waiting on the quota", lambda: manager.get(over)["status"].get("pendingReason"))
    assert manager.get(over)["status"]["pendingReason"]["type"] == "QuotaExceeded"
    assert cli("delete", "tj", "over", "-n", "team", "--state", str(fleet["manager"].state)).code == 0

    # What happened to `next` in w2 is told by `describe` on the manager.
    def w2_events() -> bool:
        events = manager.get(f"{PREFIX}/namespaces/team/events")["items"]
        return any(
            e["spec"]["involvedName"] == "next" and e["spec"]["source"].startswith("w2") for e in events
        )

    wait_for("w2's events in the manager", w2_events)
    described = cli("describe", "tj", "next", "-n", "team", "--state", str(fleet["manager"].state))
    assert described.code == 0 and "Dispatched" in described.out and "[w2] " in described.out, described.out

    deleted = cli("delete", "tj", "llm", "-n", "team", "--state", str(fleet["manager"].state))
    assert deleted.code == 0, deleted.err
    jobs_in_w1 = f"{PREFIX}/namespaces/team/trainingjobs"
    wait_for("llm gone from w1", lambda: client(fleet["w1"]).get(jobs_in_w1)["items"] == [])

    # w2 leaves: its work moves to w1 (taking work again) before its Cluster goes.
    m_state = str(fleet["manager"].state)
    assert cli("cluster", "resume", "w1", "--state", m_state).code == 0
    left = cli(
        "cluster", "leave", "w2", "--manager", fleet["manager"].url, "--manager-token", manager_token,
        "--state", str(fleet["w2"].state),
    )  # fmt: skip
    assert left.code == 0, left.err
    assert [c["metadata"]["name"] for c in manager.get(f"{PREFIX}/clusters")["items"]] == ["w1"]
    moved = wait_for("next running in w1", lambda: held_job(manager, "next"))
    assert moved["metadata"]["annotations"][CLUSTER] == "w1" and moved["status"]["restarts"] == 1
    assert client(fleet["w2"]).get(f"{PREFIX}/namespaces/team/trainingjobs")["items"] == []

    # w2 joins again; w1 (now on a 3 s lease) is killed: its work runs again in w2 once the lease and
    # the 2 s grace have passed.
    join("w2", 20)
    join("w1", 3)
    w1 = f"{PREFIX}/clusters/w1"
    wait_for("w1 on its new lease", lambda: manager.get(w1)["status"].get("leaseSeconds") == 3)
    wait_for(
        "w2 reporting again", lambda: manager.get(f"{PREFIX}/clusters/w2")["status"].get("heartbeatTime")
    )
    fleet["w1"].kill()
    lost = wait_for("next running in w2", lambda: held_job(manager, "next", in_cluster="w2"))
    assert lost["status"]["restarts"] == 2 and lost["status"]["lostGpuSeconds"] > 0

    # The workers' tokens sit in the manager's Secrets, which its API never shows.
    worker_tokens = [(fleet[n].state / "admin-token").read_text().strip() for n in ("w1", "w2")]
    shown = cli("get", "secrets", "-A", "-o", "yaml", "--state", str(fleet["manager"].state))
    assert shown.code == 0 and "cluster-w1-token" in shown.out, shown.err
    for secret in (*worker_tokens, manager_token):
        assert secret not in shown.out
        for plane in fleet.values():
            assert secret not in plane.log.read_text(), f"a token in {plane.log}"


def test_join_says_which_plane_it_cannot_reach_and_writes_nothing(cli: Callable[..., Result]) -> None:
    joined = cli(
        "cluster", "join", "w1", "--manager", "http://127.0.0.1:9", "--manager-token", "t",
        "--server", "http://127.0.0.1:9", "--token", "x",
    )  # fmt: skip
    assert joined.code == 1 and "127.0.0.1:9" in joined.err and "Traceback" not in joined.err
