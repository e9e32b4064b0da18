"""An elastic workload grown at a checkpoint: the pods its growth adds are learnt by the placement
policies (the trial cycle that found the room is a what-if and teaches nothing), and a trial that
raises is a contained failure that leaves the workload running at its size."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.controllers.plane import build_manager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.config import TwinConfig
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

OBJECTS = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 4}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: blocker}
spec:
  priorityClass: research
  replicas: 2
  worker: {gpus: 8}
  durationSeconds: 1000
"""

ELASTIC = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: big}
spec:
  priorityClass: research
  replicas: 4
  minReplicas: 2
  worker: {gpus: 8}
  checkpoint: {intervalSeconds: 600}
  restartPolicy: {maxRestarts: 0, backoffSeconds: 0}
  durationSeconds: 4000
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[SqliteStore, Runtime, SchedulingController]]:
    """The elastic job `big` running short at 2 of its 4 pods beside the blocker, which ends at 1000 s."""
    clock = VirtualClock()
    store = SqliteStore.open(tmp_path, synchronous="OFF", clock=clock.datetime)
    manager = build_manager(store)
    runtime = Runtime(
        store, clock=clock, participants=[Twin(store, clock=clock, config=TwinConfig()), manager]
    )
    [scheduling] = [c for c in manager.controllers if isinstance(c, SchedulingController)]
    try:
        for text in (OBJECTS, ELASTIC):
            for obj in load_objects(text):
                store.apply(obj)
            runtime.run_for(1)
        assert store.get("TrainingJob", "big").status.replicas == 2
        yield store, runtime, scheduling
    finally:
        store.close()


def test_the_pods_an_elastic_workload_grows_by_are_learnt_once(
    world: tuple[SqliteStore, Runtime, SchedulingController],
) -> None:
    store, runtime, scheduling = world
    fgd_plus = scheduling.scheduler.policies["fgd+"]  # the default for training
    assert fgd_plus.estimate.seen == 4  # type: ignore[attr-defined]  # blocker's 2 pods, big's 2
    runtime.run_for(1300)  # the blocker ends at 1000; big grows to 4 at its checkpoint (1201 s)
    assert store.get("TrainingJob", "big").status.replicas == 4
    # The 2 pods added, once; not the trials that found no room before, nor the restarted two.
    assert fgd_plus.estimate.seen == 6  # type: ignore[attr-defined]


@pytest.mark.contained_failures
def test_a_growth_trial_that_raises_is_counted_and_the_workload_keeps_running(
    world: tuple[SqliteStore, Runtime, SchedulingController],
    placement_bug: Callable[[Callable[[str], bool]], dict[str, bool]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, runtime, scheduling = world
    bug = placement_bug(lambda name: "big" in name)
    with caplog.at_level(logging.ERROR, logger="gpufleet.controllers.failures"):
        runtime.run_for(1300)  # its checkpoint at 1201 s finds room, and the trial raises
    assert "the trial of its growth raised" in caplog.text
    assert "a number placement cannot take" in caplog.text  # with its traceback
    assert scheduling.contained_failures >= 1  # what the simulator stops on
    job = store.get("TrainingJob", "big")
    assert (job.status.phase, job.status.replicas) == ("Running", 2)  # still working, at its size
    bug["on"] = False
    runtime.run_for(1200)  # its next checkpoint grows it (600 s of work on half its pods: at 2401 s)
    assert store.get("TrainingJob", "big").status.replicas == 4
