"""Objects a careless or hostile user may write, each valid to the API, must never fail the control
plane: the demo fleet and a dozen mutated objects (odd names, extreme and odd values in any spec
field) run three virtual hours through the twin and every controller, and no reconcile may fail and
no round may raise. Seeded, so a failure replays. Before the API refused them, such objects failed
the controllers (names they turned into invalid labels, a node's CPU past the fleet's 64-bit counts):
two of these three seeds met one."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.validation import parse_object
from gpufleet.cli.up import demo_objects
from gpufleet.controllers.plane import build_manager
from gpufleet.store.memory import MemoryStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin


@pytest.mark.parametrize("seed", [3, 7, 11])
def test_valid_but_odd_objects_never_fail_the_control_plane(seed: int, hostile_objects: Any) -> None:
    rng = random.Random(seed)
    n = 0
    for _ in range(8):
        clock = VirtualClock()
        store = MemoryStore(clock=clock.datetime)
        store.apply_many(demo_objects())
        manager = build_manager(store)
        runtime = Runtime(store, clock=clock, participants=[Twin(store, clock=clock), manager])
        for _ in range(12):
            n += 1
            try:
                store.apply(parse_object(hostile_objects.mutated(rng, n)))
            except GpuFleetError:
                continue  # refused with a reason: what the API is for
        runtime.run_until(clock.now() + 3 * 3600)
        assert manager.contained_failures == 0
