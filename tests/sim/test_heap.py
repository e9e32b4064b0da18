"""The simulator keeps the cyclic collector off during a run, freezes what is alive at each of its own
collections, frees the cycles that died before one, and leaves the collector as it found it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_simulate_smoke import synthetic_trace

from gpufleet.sim import jobfleet, jobsim, philly
from gpufleet.sim.heap import FrozenHeap


class Node:
    """A cycle: a node that refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()


def test_objects_alive_at_a_freeze_leave_the_collector_until_the_run_ends() -> None:
    kept = [Node() for _ in range(100)]
    with FrozenHeap(every=3) as heap:
        assert heap.freezes == 1 and gc.get_freeze_count() >= len(kept)
        walked = {id(obj) for obj in gc.get_objects()}  # what the collector looks at: not the frozen
        assert not walked & {id(n) for n in kept}
        more = [Node() for _ in range(50)]
        heap.tick()
        heap.tick()
        assert heap.freezes == 1  # not yet the third settle
        assert {id(n) for n in more} <= {id(obj) for obj in gc.get_objects()}
        heap.tick()
        # Frozen by the second freeze. (Not told by the freeze count: it can fall meanwhile, as
        # refcounting frees frozen objects that other threads of the test run let go of.)
        assert heap.freezes == 2
        assert not {id(obj) for obj in gc.get_objects()} & {id(n) for n in more}
    assert gc.get_freeze_count() == 0  # the run unfroze what it froze


def test_cycles_that_died_before_a_freeze_are_collected_not_frozen() -> None:
    with FrozenHeap(every=1) as heap:
        dead = Node()
        ref = weakref.ref(dead)
        del dead
        assert ref() is not None  # a cycle: refcounting alone does not free it
        heap.tick()
        assert ref() is None


def test_cycles_that_die_frozen_are_collected_once_the_run_ends() -> None:
    with FrozenHeap(every=1):
        node = Node()
        ref = weakref.ref(node)
        gc.freeze()
        del node
        gc.collect()
        assert ref() is not None  # frozen: the collector does not see it during the run
    gc.collect()
    assert ref() is None


def test_a_freeze_made_before_the_run_is_left_in_place() -> None:
    node = Node()
    gc.freeze()
    with FrozenHeap() as heap:
        heap.tick()
    # Still frozen: the collector does not walk it. (The freeze count itself can fall meanwhile, as
    # refcounting frees frozen objects other threads let go of.)
    assert gc.get_freeze_count() > 0
    assert id(node) not in {id(obj) for obj in gc.get_objects()}
    assert node.me is node


def test_automatic_collection_is_off_during_the_run_and_back_after_it() -> None:
    assert gc.isenabled()
    with FrozenHeap():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with FrozenHeap():
            pass
        assert not gc.isenabled()  # a collector turned off before the run stays off
    finally:
        gc.enable()


def test_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every must be at least 1"):
        FrozenHeap(every=0)


def test_a_simulation_leaves_nothing_frozen(tmp_path: Path) -> None:
    trace = philly.load(synthetic_trace(tmp_path / "trace.csv", 20))
    pools = jobfleet.fleet_of_gpus(32)
    queues = jobfleet.trace_queues(trace.gpu_demand(), pools)
    result = jobsim.simulate(trace, pools, queues)
    assert len(result.jobs) == 20 and all(r.end is not None for r in result.jobs.values())
    assert gc.get_freeze_count() == 0 and gc.isenabled()
