"""The runtime as `gpufleet up` runs it: real time, in a background thread, beside other writers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.controllers.plane import build_manager
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import WallClock
from gpufleet.twin.config import TwinConfig
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

OBJECTS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: box}
spec: {gpuModel: L4, gpusPerNode: 2, nodes: 1}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: quick}
spec: {replicas: 1, worker: {gpus: 2}, durationSeconds: 0.5}
"""


def test_a_job_runs_to_completion_in_real_time(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path, synchronous="OFF")
    clock = WallClock()
    runtime = Runtime(
        store,
        clock=clock,
        participants=[Twin(store, clock=clock, config=TwinConfig()), build_manager(store)],
        poll_seconds=0.05,
    )
    stop = threading.Event()
    thread = runtime.start(stop)
    try:
        for obj in load_objects(OBJECTS):  # written from this thread, as the HTTP API would
            store.apply(obj)
        deadline = time.monotonic() + 10
        phase = None
        while time.monotonic() < deadline:
            phase = store.get("TrainingJob", "quick", "default").status.phase
            if phase == "Succeeded":
                break
            time.sleep(0.05)
        assert phase == "Succeeded"
    finally:
        stop.set()
        thread.join(timeout=5)
        store.close()
    assert not thread.is_alive()
