"""An in-process control plane on a virtual clock: store, twin, controllers, one runtime driver."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.plane import build_manager
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.config import TwinConfig
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin


@dataclass
class World:
    store: SqliteStore
    clock: VirtualClock
    twin: Twin
    manager: ControllerManager
    runtime: Runtime
    path: Path

    def apply(self, text: str) -> None:
        for obj in load_objects(text):
            self.store.apply(obj)

    def get(self, kind: str, name: str, namespace: str | None = None):
        return self.store.get(kind, name, namespace)

    @property
    def now(self) -> float:
        return self.clock.now()


def make_world(path: Path, *, clock: VirtualClock | None = None, config: TwinConfig | None = None) -> World:
    clock = clock or VirtualClock()
    store = SqliteStore.open(path, synchronous="OFF", clock=clock.datetime)
    twin = Twin(store, clock=clock, config=config or TwinConfig())
    manager = build_manager(store)
    runtime = Runtime(store, clock=clock, participants=[twin, manager])
    return World(store, clock, twin, manager, runtime, path)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = make_world(tmp_path)
    yield w
    w.store.close()
