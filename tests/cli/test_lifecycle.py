"""A job's life on the embedded control plane, through the CLI, at 240x real time: admitted,
running, checkpointed, a GPU failure, the restart from its checkpoint, completion; and a `kill -9`
of the control plane while jobs run, after which nothing is lost or duplicated."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Plane, Result, wait_for

HERE = Path(__file__).parent
FLEET = str(HERE / "fleet.yaml")
JOBS = str(HERE / "jobs.yaml")
SCALE = "240"


def job(cli: Callable[..., Result], name: str = "train", namespace: str = "team-a") -> dict[str, Any]:
    result = cli("get", "tj", name, "-n", namespace, "-o", "json")
    assert result.code == 0, result.err
    data: dict[str, Any] = result.json()
    return data


def pods_of(cli: Callable[..., Result], name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cli("get", "pods", "-A", "-o", "json").json()["items"]
    return [p for p in items if p["metadata"].get("labels", {}).get("gpufleet.io/training-job") == name]


@pytest.mark.slow
def test_admitted_running_checkpointed_failed_restarted_completed(
    planes: Callable[..., Plane], cli: Callable[..., Result]
) -> None:
    planes("--fleet", FLEET, "--time-scale", SCALE)
    assert cli("apply", "-f", JOBS).code == 0
    wait_for(lambda: job(cli)["status"]["phase"] == "Running", timeout=30, what="the job to run")
    assert job(cli)["status"].get("admittedTime")
    checkpoint = wait_for(
        lambda: job(cli)["status"].get("lastCheckpoint"), timeout=30, what="a checkpoint of the job"
    )
    assert checkpoint["step"] > 0

    running = [p for p in pods_of(cli, "train") if p.get("status", {}).get("phase") == "Running"]
    node = running[0]["spec"]["nodeName"]
    gpu = running[0]["spec"].get("gpus", [0])[0]
    injected = cli("fault", "gpu-failure", node, "--gpu", str(gpu))
    assert injected.code == 0, injected.err

    restarted = wait_for(
        lambda: job(cli)["status"]["restarts"] >= 1 and job(cli), timeout=30, what="a restart"
    )
    assert restarted["status"]["lostGpuSeconds"] > 0
    # The lost work is what ran since the last checkpoint, not since the start.
    assert restarted["status"]["lostGpuSeconds"] < 8 * 1800
    described = cli("describe", "tj", "train", "-n", "team-a").out
    assert "Restarting" in described or "Restarts:" in described

    done = wait_for(
        lambda: job(cli)["status"]["phase"] == "Succeeded" and job(cli), timeout=60, what="completion"
    )
    assert done["status"]["restarts"] == 1
    assert "Succeeded" in cli("events").out
    top = cli("top")
    assert top.code == 0 and "h100" in top.out and "team-a" in top.out


@pytest.mark.slow
def test_kill_9_loses_nothing_and_duplicates_nothing(
    planes: Callable[..., Plane], cli: Callable[..., Result], tmp_path: Path
) -> None:
    plane = planes("--fleet", FLEET, "--time-scale", SCALE)
    names = [f"job-{i}" for i in range(6)]
    manifest = tmp_path / "many.yaml"
    manifest.write_text(
        "\n---\n".join(
            "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\n"
            f"metadata: {{name: {name}, namespace: team-a}}\n"
            "spec: {queue: team-a, replicas: 1, worker: {gpus: 4}, durationSeconds: 1200,"
            " checkpoint: {intervalSeconds: 120}}"
            for name in names
        )
    )
    assert cli("apply", "-f", str(manifest)).code == 0
    wait_for(
        lambda: sum(job(cli, n)["status"]["phase"] == "Running" for n in names) >= 4,
        timeout=30,
        what="jobs to run",
    )
    before = {n: job(cli, n) for n in names}
    plane.kill()  # SIGKILL: no shutdown of any kind

    planes("--fleet", FLEET, "--time-scale", SCALE)
    after = cli("get", "tj", "-n", "team-a", "-o", "json").json()["items"]
    assert sorted(j["metadata"]["name"] for j in after) == names  # nothing lost, nothing twice
    for item in after:
        old = before[item["metadata"]["name"]]
        assert item["metadata"]["uid"] == old["metadata"]["uid"]
        assert int(item["metadata"]["resourceVersion"]) >= int(old["metadata"]["resourceVersion"])
    for name in names:
        pods = pods_of(cli, name)
        live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        assert len(live) <= 1, f"{name} has {len(live)} live pods"
    wait_for(
        lambda: all(job(cli, n)["status"]["phase"] == "Succeeded" for n in names),
        timeout=90,
        what="every job to finish after the restart",
    )


def test_a_second_up_on_a_state_directory_in_use_fails_and_leaves_the_first_alone(
    planes: Callable[..., Plane], tmp_path: Path
) -> None:
    first = planes("--no-runtime")
    state = tmp_path / "state"
    command = [sys.executable, "-m", "gpufleet.cli.main", "up", "--state", str(state), "--port", "0"]
    second = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second
    lines = [line for line in (second.stdout + second.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert str(state) in lines[0] and first.url in lines[0] and str(first.process.pid) in lines[0]
    # The first server's URL file is untouched and it still serves.
    assert (state / "server.url").read_text().strip() == first.url
    assert first.process.poll() is None
