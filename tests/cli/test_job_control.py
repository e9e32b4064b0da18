"""Controlling jobs from the CLI against one `gpufleet up` with its digital twin: the NODES column of
`get tj -o wide`, `suspend`/`resume` (Kueue's stop and resume), `apply --dry-run`, `logs`.

One control plane at a minute of fleet time a second, two 8-GPU nodes: `big` holds both for ten
hours of fleet time, so `small` waits until `big` is suspended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.client import Client

from .conftest import Plane, Result, start_plane, stop_plane, wait_for

FLEET = str(Path(__file__).parent / "habits-fleet.yaml")
JOBS = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: big, namespace: team-a}
spec:
  queue: team-a
  replicas: 2
  worker: {gpus: 8, gpuModel: H100}
  checkpoint: {intervalSeconds: 10, uri: s3://ckpt/big}
  durationSeconds: 36000
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: small, namespace: team-a}
spec: {queue: team-a, replicas: 1, worker: {gpus: 4}, durationSeconds: 36000}
"""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    started = start_plane(tmp_path_factory.mktemp("jobs") / "state", "--fleet", FLEET, "--time-scale", "60")
    try:
        yield started
    finally:
        stop_plane(started)


@pytest.fixture
def state(plane: Plane) -> Path:
    assert plane.process.poll() is None, f"the control plane died:\n{plane.log.read_text()}"
    return plane.state


def status(plane: Plane, name: str) -> Any:
    client = Client(plane.url, (plane.state / "admin-token").read_text().strip())
    try:
        job = client.read(client.resource_type("tj"), name, "team-a")
    finally:
        client.close()
    return job.get("status") or {}


def phase(plane: Plane, name: str) -> Any:
    return status(plane, name).get("phase")


def test_wide_listing_names_nodes_and_suspend_resume_move_the_gpus(
    plane: Plane, cli: Callable[..., Result]
) -> None:
    assert cli("apply", "-f", "-", stdin=JOBS).code == 0
    wait_for(lambda: phase(plane, "big") == "Running", timeout=30, what="big to run")
    table = cli("get", "tj", "-n", "team-a", "-o", "wide").out.splitlines()
    header, row = table[0].split(), next(line.split() for line in table if line.startswith("big"))
    assert "NODES" in header and set(row[header.index("NODES")].split(",")) == {"h100-0", "h100-1"}
    assert "NODES" not in cli("get", "tj", "-n", "team-a").out  # only in the wide table
    assert phase(plane, "small") == "Pending"
    wait_for(lambda: status(plane, "big").get("lastCheckpoint"), timeout=30, what="a checkpoint of big")

    suspended = cli("suspend", "tj", "big", "-n", "team-a")
    assert suspended.code == 0 and "trainingjob/team-a/big suspended" in suspended.out
    wait_for(lambda: phase(plane, "big") == "Suspended", timeout=20, what="big to be suspended")
    wait_for(lambda: phase(plane, "small") == "Running", timeout=20, what="small to take the GPUs")
    assert "already suspended" in cli("suspend", "tj", "big", "-n", "team-a").out

    assert cli("resume", "tj", "big", "-n", "team-a").code == 0
    wait_for(lambda: phase(plane, "big") == "Pending", timeout=20, what="big to queue again")
    described = cli("describe", "tj", "big", "-n", "team-a").out
    assert "Resumed" in described

    refused = cli("suspend", "queue", "team-a")
    assert refused.code == 2 and "only a TrainingJob or InferenceService can be suspended" in refused.err
    assert cli("suspend", "tj", "nothing", "-n", "team-a").code == 1


def test_apply_dry_runs_check_and_report_without_storing(plane: Plane, cli: Callable[..., Result]) -> None:
    text = "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: trial}\n"
    text += "spec: {queue: team-b, replicas: 1, worker: {gpus: 1}, durationSeconds: 60}\n"
    server = cli("apply", "-f", "-", "-n", "team-b", "--dry-run=server", stdin=text)
    assert server.code == 0 and "trainingjob/team-b/trial created (server dry run)" in server.out
    client = cli("apply", "-f", "-", "-n", "team-b", "--dry-run=client", stdin=text)
    assert client.code == 0 and "trainingjob/team-b/trial checked (client dry run)" in client.out
    assert cli("get", "tj", "trial", "-n", "team-b").code == 1  # neither stored it
    unknown_queue = cli("apply", "-f", "-", "--dry-run=server", stdin=text.replace("team-b", "team-z"))
    assert unknown_queue.code == 2 and "team-z" in unknown_queue.err  # refused as a real apply is
    bad = text.replace("gpus: 1", 'gpus: "1"')
    for mode in ("client", "server"):
        refused = cli("apply", "-f", "-", f"--dry-run={mode}", stdin=bad)
        assert refused.code == 2 and "spec.worker.gpus" in refused.err, (mode, refused)
    assert cli("apply", "-f", "-", "--dry-run=maybe", stdin=text).code == 2


def test_logs_tell_a_jobs_pods_lifecycle_and_follow_until_it_ends(
    plane: Plane, cli: Callable[..., Result]
) -> None:
    # `big` ran, checkpointed and was suspended by the first test: its log says so, pod by pod.
    lines = cli("logs", "tj/big", "-n", "team-a").out.splitlines()
    text = "\n".join(lines)
    assert all(line.startswith("[big-") or line.startswith("[job-big") for line in lines), lines[:3]
    said_by_the_twin = (
        "placed on node h100-",
        "started on node h100-",
        "training run started from step 0",
        "checkpoint written at step ",
        "stopped: Suspended",
    )
    for said in said_by_the_twin:
        assert said in text, (said, text)
    small = cli("logs", "tj/small", "-n", "team-a").out.splitlines()
    pod = small[0].split("]")[0].lstrip("[")  # small runs: its pod is there to ask about
    alone = cli("logs", f"pod/{pod}", "-n", "team-a").out.splitlines()
    assert alone == [line.split("] ", 1)[1] for line in small]  # one pod's lines, unprefixed

    brief = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: brief, namespace: team-a}\n"
    )
    brief += "spec: {queue: team-a, replicas: 1, worker: {gpus: 1}, durationSeconds: 120}\n"
    assert cli("apply", "-f", "-", stdin=brief).code == 0
    followed = cli("logs", "tj/brief", "-n", "team-a", "-f")  # returns once the job has finished
    assert followed.code == 0 and "Succeeded: Completed: the job's work is done" in followed.out
    assert phase(plane, "brief") == "Succeeded"

    assert cli("logs", "tj/nothing", "-n", "team-a").code == 1
    assert cli("logs", "queue/team-a").code == 2
