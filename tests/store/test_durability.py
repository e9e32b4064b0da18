"""kill -9 at random moments: every acknowledged write survives, nothing is duplicated or half-written."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.api import TrainingJob
from gpufleet.store import SqliteStore
from gpufleet.store.sqlite import FILE_NAME

WRITER = Path(__file__).with_name("writer_process.py")


def run_and_kill(state_dir: Path, prefix: str, delay: float) -> list[tuple[str, str, int, int]]:
    """Starts a writer, kills it with SIGKILL after `delay` seconds, returns its acknowledged writes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(state_dir), prefix], stdout=subprocess.PIPE, text=True, env=env
    )
    time.sleep(delay)
    writer.send_signal(signal.SIGKILL)
    output, _ = writer.communicate(timeout=30)
    acks = []
    for line in output.splitlines(keepends=True):
        parts = line.split()
        if line.endswith("\n") and len(parts) == 4:  # a line cut by the kill was never acknowledged
            acks.append((parts[0], parts[1], int(parts[2]), int(parts[3])))
    return acks


@pytest.mark.slow
def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    acknowledged: dict[str, tuple[int, int]] = {}  # name -> (replicas, resourceVersion) last acknowledged
    for round_index in range(5):
        delay = rng.uniform(0.05, 1.5)  # from before the store is open to mid-stream
        for verb, name, replicas, version in run_and_kill(tmp_path, f"r{round_index}", delay):
            assert verb in {"create", "update"}
            acknowledged[name] = (replicas, version)
    assert len(acknowledged) > 10, "the writer should have acknowledged some writes"

    with SqliteStore.open(tmp_path) as store:
        jobs = store.list(TrainingJob, namespace="durable").items  # every body validates as a TrainingJob
        by_name = {job.name: job for job in jobs}
        assert len(by_name) == len(jobs), "duplicate objects"
        for name, (replicas, version) in acknowledged.items():
            assert name in by_name, f"acknowledged {name} was lost"
            stored = by_name[name]
            assert stored.spec.replicas >= replicas, f"acknowledged update of {name} was lost"
            assert int(stored.metadata.resource_version or 0) >= version
        for job in jobs:  # replicas and generation move together in one write; a torn write breaks that
            assert job.metadata.generation == job.spec.replicas, f"{job.name} is half-written"
        head = int(store.resource_version)
        events = store.events_since(0)

    versions = [event.resource_version for event in events]
    assert versions == sorted(set(versions)), "resourceVersions are not strictly increasing"
    assert versions == list(range(1, head + 1)), "a version was skipped or an event lost"
    last_event = {event.object.name: event for event in events}
    for job in jobs:
        assert int(job.metadata.resource_version or 0) == last_event[job.name].resource_version
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (body,) = db.execute("SELECT body FROM objects LIMIT 1").fetchone()
        assert json.loads(body)["kind"] == "TrainingJob"
