"""kill -9 at random moments: every acknowledged write survives, nothing is duplicated or half-written."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpufleet.api import TrainingJob
from gpufleet.store import SqliteStore
from gpufleet.store.sqlite import FILE_NAME

WRITER = Path(__file__).with_name("writer_process.py")
BATCH_WRITER = Path(__file__).with_name("batch_writer_process.py")
BATCH_SIZE = 150


def acknowledged_lines(script: Path, args: list[str], delay: float, *, at_least: int = 0) -> list[list[str]]:
    """Runs a writer script, kills it with SIGKILL after `delay` seconds (and, on a machine too busy
    for it to have printed `at_least` lines by then, once it has), returns the words of each line it
    printed whole (a line cut by the kill was never acknowledged)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True, env=env
    )
    assert writer.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(writer.stdout or ()), daemon=True)
    reader.start()
    time.sleep(delay)
    deadline = time.monotonic() + 60
    while len(lines) < at_least and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    reader.join(timeout=30)
    return [line.split() for line in lines if line.endswith("\n")]


def run_and_kill(
    state_dir: Path, prefix: str, delay: float, *, at_least: int = 0
) -> list[tuple[str, str, int, int]]:
    """Starts a writer, kills it with SIGKILL after `delay` seconds, returns its acknowledged writes."""
    return [
        (parts[0], parts[1], int(parts[2]), int(parts[3]))
        for parts in acknowledged_lines(WRITER, [str(state_dir), prefix], delay, at_least=at_least)
        if len(parts) == 4
    ]


@pytest.mark.slow
def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    acknowledged: dict[str, tuple[int, int]] = {}  # name -> (replicas, resourceVersion) last acknowledged
    for round_index in range(5):
        delay = rng.uniform(0.05, 1.5)  # from before the store is open to mid-stream
        at_least = 25 if round_index == 4 else 0  # the last round acknowledges a dozen jobs at least
        for verb, name, replicas, version in run_and_kill(
            tmp_path, f"r{round_index}", delay, at_least=at_least
        ):
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


@pytest.mark.slow
def test_a_batch_is_whole_or_absent_after_sigkill(tmp_path: Path) -> None:
    """Batches of creates and updates, killed at random moments: none is ever half there."""
    rng = random.Random(20261207)
    acknowledged: dict[str, tuple[int, int]] = {}  # batch -> (first, last) resourceVersion
    rounds = [f"r{index}" for index in range(6)]
    for prefix in rounds:
        delay = rng.uniform(0.2, 1.5)  # from before the store is open to many batches in
        args = [str(tmp_path), prefix, str(BATCH_SIZE)]
        at_least = 4 if prefix == rounds[-1] else 0  # the last round acknowledges three batches at least
        for parts in acknowledged_lines(BATCH_WRITER, args, delay, at_least=at_least):
            if parts[0] == "batch":
                acknowledged[parts[1]] = (int(parts[2]), int(parts[3]))
    assert len(acknowledged) >= 3, "the writer should have acknowledged some batches"

    with SqliteStore.open(tmp_path) as store:
        jobs = store.list(TrainingJob, namespace="batches").items
        events = store.events_since(0)
        head = int(store.resource_version)
    by_batch: dict[str, list[TrainingJob]] = {}
    for job in jobs:
        by_batch.setdefault(job.metadata.labels["batch"], []).append(job)

    for batch, (first, last) in acknowledged.items():
        assert batch in by_batch, f"acknowledged batch {batch} was lost"
        assert last - first + 1 in (BATCH_SIZE, 2 * BATCH_SIZE), "a batch's versions are not consecutive"
    for batch, members in by_batch.items():
        assert len(members) == BATCH_SIZE, f"batch {batch} is half there: {len(members)} of {BATCH_SIZE}"
        prefix, index = batch.rsplit("-", 1)
        successor_there = f"{prefix}-{int(index) + 1}" in by_batch
        replicas = {job.spec.replicas for job in members}
        assert replicas == {2 if successor_there else 1}, f"batch {batch} is half updated: {replicas}"

    versions = [event.resource_version for event in events]
    assert versions == list(range(1, head + 1)), "a version was skipped or an event lost"
    # Each batch's events are one run of versions, none of another batch's between them.
    runs: list[str] = []
    for event in events:
        writer_batch = _writing_batch(event.object, event.type)
        if not runs or runs[-1] != writer_batch:
            runs.append(writer_batch)
    assert len(runs) == len(set(runs)), "the events of two batches interleave"
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _writing_batch(obj: object, event_type: str) -> str:
    """The batch that wrote an event: its own for a create, the next one for the update to 2."""
    assert isinstance(obj, TrainingJob)
    batch = obj.metadata.labels["batch"]
    if event_type == "ADDED":
        return batch
    prefix, index = batch.rsplit("-", 1)
    return f"{prefix}-{int(index) + 1}"
