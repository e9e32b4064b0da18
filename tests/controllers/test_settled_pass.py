"""A backlog that nothing but a change of the cluster can move is not scheduled again every 30 s
(`scheduler.settled`): the periodic pass only ages the waiting gauges, and the first change admits at
once. With a minimum runtime the periodic pass still runs, since time alone may then free victims."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import FlavorQuota, Queue, QueueSpec
from gpufleet.api.runtime import Workload
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock

from .test_queue_tree import submit
from .test_scheduling import ready_node


class World:
    """A store and its scheduling controller on a virtual clock; `at(t)` steps them t seconds in."""

    def __init__(self, tmp_path: Path, queue: str, min_runtime: float = 0.0) -> None:
        self.clock = VirtualClock()
        self.start = self.clock.now()
        self.store = store = SqliteStore.open(tmp_path, synchronous="OFF", clock=self.clock.datetime)
        self.scheduling = SchedulingController(store, resync_seconds=30.0)
        self.manager = ControllerManager(store, [self.scheduling])
        ready_node(store, "n1", gpus=8)
        spec = QueueSpec(quotas={"H100": FlavorQuota(nominal=64)}, min_runtime_seconds=min_runtime)
        store.create(Queue(metadata=ObjectMeta(name=queue), spec=spec))
        submit(store, "long", queue, gpus=8)  # holds the one 8-GPU node
        self.at(0.0)
        assert store.get(Workload, "long").status.phase == "Admitted"
        submit(store, "wait-a", queue, gpus=4)
        submit(store, "wait-b", queue, gpus=8)
        self.at(1.0)

    def at(self, seconds: float) -> None:
        self.clock.advance_to(self.start + seconds)
        for _ in range(3):
            self.manager.step(self.clock.now())


def oldest_wait(queue: str) -> float | None:
    return REGISTRY.get_sample_value("gpufleet_pending_oldest_seconds", {"queue": queue, "reason": "NoFit"})


def test_a_settled_backlog_is_not_scheduled_again_until_the_cluster_changes(tmp_path: Path) -> None:
    world = World(tmp_path, "settled-team")
    store, sched = world.store, world.scheduling
    world.at(31.0)  # the first periodic pass: it finds what the last one found
    assert sched.settled
    cycles = sched.stats.cycles
    for minute in range(1, 61):
        world.at(31.0 + 60.0 * minute)
    assert sched.stats.cycles == cycles  # an hour of periodic passes ran no cycle
    waited = oldest_wait("settled-team")
    assert waited is not None and waited >= 3600.0  # yet the wait went on being measured
    for name in ("wait-a", "wait-b"):
        found = store.get(Workload, name).status
        assert found.phase == "Pending" and found.pending_reason is not None
        assert found.pending_reason.type == "NoFit"

    store.delete(Workload, "long")  # the node is free: a change, scheduled at once
    world.at(3700.0)
    assert store.get(Workload, "wait-a").status.phase == "Admitted"
    assert sched.stats.cycles > cycles


def test_with_a_minimum_runtime_the_periodic_pass_still_runs(tmp_path: Path) -> None:
    world = World(tmp_path, "timed-team", min_runtime=600.0)
    sched = world.scheduling
    world.at(31.0)
    assert not sched.settled
    cycles = sched.stats.cycles
    world.at(61.0)
    assert sched.stats.cycles > cycles
