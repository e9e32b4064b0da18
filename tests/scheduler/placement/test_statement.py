"""The Statement: tentative work is undone exactly; commit hands back what the world must carry out."""

from __future__ import annotations

import numpy as np
import pytest
from placement_builders import FirstFit, fleet, gpus, node, racks, workload

from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.statement import OpKind, Statement, StatementClosed, net_operations


def image(state: FleetState) -> bytes:
    names = ("cpu_free", "mem_free", "gpu_free", "gpu_pods", "whole_free", "mig_free")
    parts = [getattr(state, n).tobytes() for n in names]
    parts += [t.tobytes() for t in state.domain_whole_free]
    parts.append(repr(sorted(state.allocations.items())).encode())
    parts.append(repr([state.mig_instances(r) for r in state.rows()]).encode())
    return b"|".join(parts)


def mixed_fleet() -> FleetState:
    state = fleet(
        node("n0", labels={"rack": "r0"}),
        node("n1", labels={"rack": "r0"}),
        node(
            "m0",
            2,
            sharing=SharingMode.MIG,
            mig={0: ["3g.40gb", "3g.40gb"], 1: ["7g.80gb"]},
            labels={"rack": "r1"},
        ),
        levels=("rack",),
    )
    state.allocate("old-a", 0, gpus(4), (0, 1, 2, 3))
    state.allocate("old-b", 1, PodRequest(gpu_milli=500), (0,))
    state.allocate("old-m", 2, PodRequest(mig="3g.40gb"))
    return state


def test_discard_leaves_the_arrays_byte_identical() -> None:
    state = mixed_fleet()
    before = image(state)
    stmt = Statement(state)
    stmt.release("old-a")
    stmt.release("old-m")
    stmt.allocate("new", 0, gpus(8), tuple(range(8)))
    stmt.allocate("new-m", 2, PodRequest(mig="3g.40gb"))
    stmt.allocate("new-s", 1, PodRequest(gpu_milli=500), (0,))
    assert image(state) != before
    stmt.discard()
    assert image(state) == before
    state.check_invariants()
    with pytest.raises(StatementClosed):
        stmt.allocate("late", 0, gpus(1), (4,))


def test_rollback_to_a_checkpoint_keeps_what_came_before() -> None:
    state = mixed_fleet()
    stmt = Statement(state)
    stmt.allocate("keep", 0, gpus(1), (4,))
    mark = stmt.checkpoint()
    after_keep = image(state)
    stmt.release("old-b")
    stmt.allocate("drop", 1, gpus(8), tuple(range(8)))
    stmt.rollback(mark)
    assert image(state) == after_keep
    ops = stmt.commit()
    assert [(op.kind, op.pod) for op in ops] == [(OpKind.ALLOCATE, "keep")]


def test_failed_gang_inside_a_callers_statement_leaves_no_trace() -> None:
    state = racks(1, 2, 2)
    state.allocate("x", 0, gpus(1), (0,))
    stmt = Statement(state)
    stmt.allocate("first", 3, gpus(8), tuple(range(8)))
    mark_image = image(state)
    result = place_workload(
        state,
        workload("w", ("p", 2, gpus(8)), required="rack"),
        policy=FirstFit(),
        rng=np.random.default_rng(0),
        statement=stmt,
    )
    assert not result.placed
    assert image(state) == mark_image and stmt.checkpoint() == 1


def test_preemption_what_if_evicts_places_and_discards() -> None:
    state = fleet(node("n0"), node("n1"))
    state.allocate("victim", 0, gpus(8), tuple(range(8)))
    state.allocate("other", 1, gpus(8), tuple(range(8)))
    before = image(state)
    stmt = Statement(state)
    stmt.release("victim")
    result = place_workload(
        state,
        workload("w", ("p", 1, gpus(8))),
        policy=FirstFit(),
        rng=np.random.default_rng(0),
        statement=stmt,
    )
    assert result.placed and result.nodes() == {"w/p/0": "n0"}
    stmt.discard()
    assert image(state) == before


def test_commit_returns_binds_and_evictions_and_net_folds_pairs() -> None:
    state = mixed_fleet()
    stmt = Statement(state)
    stmt.release("old-a")
    stmt.allocate("moved", 0, gpus(2), (0, 1))
    stmt.allocate("temp", 0, gpus(1), (2,))
    stmt.release("temp")
    alloc = stmt.release("old-b")
    state.reinstate(alloc)  # outside the statement, only to build the next op by hand
    state.release("old-b")
    stmt.allocate("old-b", 1, PodRequest(gpu_milli=500), (0,))
    ops = stmt.commit()
    assert [op.kind for op in ops].count(OpKind.RELEASE) == 3
    net = net_operations(ops)
    assert [(op.kind, op.pod) for op in net] == [(OpKind.RELEASE, "old-a"), (OpKind.ALLOCATE, "moved")]
