"""Two embedded planes for the `gpufleet cluster join` tests: a manager and a worker, each a store with
its HTTP API on loopback, on one virtual clock, run by hand (`Federation.run`) the way `gpufleet up`
would run them, with the manager's federation controller and the worker's reporter built from what the
join wrote."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.cli.client import Client
from gpufleet.cli.federation_http import connect_embedded, joined_worker
from gpufleet.controllers.plane import build_manager
from gpufleet.federation.mirror import FederationController
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.serve import ApiServer
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

WORKER_FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: h100}
spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 1, pricePerGPUHour: 2.0}
"""
MANAGER_FLEET = """
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: team}
spec: {quotas: {H100-80GB: {nominal: 8}}}
"""


@dataclass
class Plane:
    store: SqliteStore
    tokens: TokenRegistry
    server: ApiServer
    thread: threading.Thread
    url: str
    """Kept: a stopped server no longer knows its port."""

    def client(self, token: str) -> Client:
        return Client(self.url, token)

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(timeout=30)


def serve(directory: Path, clock: VirtualClock) -> Plane:
    store = SqliteStore.open(directory, clock=clock.datetime, synchronous="OFF")
    tokens = TokenRegistry(directory, now=clock.datetime)
    server = ApiServer(create_app(store, tokens, now=clock.datetime), state_dir=directory, port=0)
    server.bind()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert server.started.wait(30), "the server did not start"
    return Plane(store, tokens, server, thread, server.url)


@dataclass
class Federation:
    manager: Plane
    worker: Plane
    clock: VirtualClock
    runtimes: list[Runtime]

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.clock.advance_to(self.clock.now() + 1)
            for runtime in self.runtimes:
                runtime.settle()

    def until(self, what: str, check: Callable[[], bool], seconds: int = 60) -> None:
        for _ in range(seconds):
            if check():
                return
            self.run(1)
        raise AssertionError(f"not within {seconds} s: {what}")


@contextmanager
def joined_planes(tmp_path: Path) -> Iterator[tuple[Plane, Plane, VirtualClock, list[Runtime]]]:
    """A manager plane with a queue and a worker plane with one H100 node; the manager reaches the
    worker, and the worker the manager, with what a join writes (nothing until one runs)."""
    clock = VirtualClock()
    manager, worker = serve(tmp_path / "manager", clock), serve(tmp_path / "w1", clock)
    for obj in load_objects(MANAGER_FLEET):
        manager.store.apply(obj)
    for obj in load_objects(WORKER_FLEET):
        worker.store.apply(obj)
    controller = FederationController(manager.store, connect_embedded(manager.store), grace_seconds=2.0)
    controllers = build_manager(worker.store)
    joined = joined_worker(worker.store, controllers, heartbeat_seconds=2.0)
    runtimes = [
        Runtime(manager.store, clock=clock, participants=[controller]),
        Runtime(
            worker.store, clock=clock, participants=[Twin(worker.store, clock=clock), controllers, joined]
        ),
    ]
    try:
        yield manager, worker, clock, runtimes
    finally:
        for plane in (manager, worker):
            plane.stop()
            plane.store.close()
