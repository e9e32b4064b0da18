"""`fgd+` scores a large batch once per group of alike rows, and finishes the scores of a few rows in Python
floats: the values must be those of every row scored in one numpy batch, to the bit (a tie between two
nodes must not break on rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement import alike
from gpufleet.scheduler.placement.alike import alike_rows
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.scheduler.placement.gpus import choose_gpus
from gpufleet.scheduler.placement.score_fgd import FragmentationModel, TypicalWorkload
from gpufleet.scheduler.placement.score_fgdplus import GROUP_ROWS, AdaptiveFgdPolicy
from gpufleet.scheduler.placement.scoring import pick

REQUESTS = (
    PodRequest(cpu_milli=8_000, gpus=1),
    PodRequest(cpu_milli=20_000, gpus=2),
    PodRequest(cpu_milli=64_000, gpus=8),
    PodRequest(cpu_milli=2_000, gpu_milli=250),
    PodRequest(cpu_milli=4_000, gpu_milli=500),
    PodRequest(cpu_milli=12_000, gpu_milli=500, gpu_models=("T4",)),
    PodRequest(cpu_milli=6_000, gpus=1, gpu_models=("A100", "T4")),
    PodRequest(cpu_milli=6_000),
)
# (model, GPUs, CPU milli, sharing): node types, many nodes each, as in a real fleet; the first two
# differ only in their model, which pods that name models tell apart.
NODE_TYPES = (
    ("A100", 8, 96_000, SharingMode.DYNAMIC),
    ("T4", 8, 96_000, SharingMode.DYNAMIC),
    ("A100", 8, 64_000, SharingMode.DYNAMIC),
    ("T4", 2, 64_000, SharingMode.DYNAMIC),
    ("V100", 4, 48_000, SharingMode.TIME_SLICING),
    ("V100", 4, 48_000, SharingMode.MPS),
)


def typed_fleet(per_type: int) -> FleetState:
    state = FleetState(("rack",), max_gpus=8)
    for t, (model, gpus, cpu, mode) in enumerate(NODE_TYPES):
        for i in range(per_type):
            labels = {"rack": f"r{i % 4}"}
            spec = NodeSpec(
                f"{model}-{t}-{i}", model, gpus, cpu, 512_000, labels=labels, sharing=mode, replicas=3
            )
            state.add_node(spec)
    return state


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grouped_and_row_by_row_scores_equal_one_numpy_batch_to_the_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    state = typed_fleet(12)
    policy = AdaptiveFgdPolicy(first_refit=8)
    running: list[str] = []
    grouped_batches = 0
    for step in range(250):
        request = REQUESTS[int(rng.integers(len(REQUESTS)))]
        rows = filter_nodes(state, request).rows
        if not rows.size:
            continue
        scored = policy.score(state, request, rows)
        if rows.size >= GROUP_ROWS:
            grouped_batches += 1
            grouped, grouped_gpu = policy._compute(state, request, rows)
            batch, batch_gpu = policy._compute_rows(state, request, rows)  # numpy throughout
            one_by_one = [policy._compute_rows(state, request, rows[i : i + 1]) for i in range(rows.size)]
            assert grouped.tobytes() == batch.tobytes()
            assert np.concatenate([v for v, _ in one_by_one]).tobytes() == batch.tobytes()
            assert grouped_gpu.tolist() == batch_gpu.tolist()
            assert np.concatenate([g for _, g in one_by_one]).tolist() == batch_gpu.tolist()
        row = int(rows[pick(scored, rng)])
        gpus = choose_gpus(
            state, row, request, proposed=scored.gpus[int(np.flatnonzero(rows == row)[0])]
        ).gpus
        state.allocate(f"p{step}", row, request, gpus)
        policy.observe(state, row)
        policy.learn(request)
        running.append(f"p{step}")
        if rng.random() < 0.3:
            alloc = state.release(running.pop(int(rng.integers(len(running)))))
            policy.observe(state, alloc.node)
    assert grouped_batches > 50


def test_a_row_refreshed_alone_equals_the_row_refreshed_with_the_fleet() -> None:
    """Row by row (the values of a node state kept and reused when a row comes back to it, as nodes
    filling and emptying do) and the whole fleet at once give the same values to the bit."""
    rng = np.random.default_rng(3)
    state = typed_fleet(3)
    typical = TypicalWorkload.from_requests(REQUESTS)
    model = FragmentationModel(typical, by_capacity=True)
    model.sync(state)
    running: list[str] = []
    refreshes = 0
    for step in range(300):
        if running and rng.random() < 0.4:
            row = state.release(running.pop(int(rng.integers(len(running))))).node
        else:
            request = REQUESTS[int(rng.integers(len(REQUESTS)))]
            rows = filter_nodes(state, request).rows
            if not rows.size:
                continue
            row = int(rows[int(rng.integers(rows.size))])
            state.allocate(f"p{step}", row, request, choose_gpus(state, row, request).gpus)
            running.append(f"p{step}")
        model.refresh(state, row)  # this row alone
        refreshes += 1
    assert len(model._row_memo) < refreshes, "some rows came back to a state already seen"
    fresh = FragmentationModel(typical, by_capacity=True)
    fresh.sync(state)  # every row at once
    n = state.n_rows
    for kept in ("fit_gpus", "stranded", "idle", "frag", "_free_seen", "_cpu_seen", "_pods_seen"):
        assert getattr(model, kept)[:n].tobytes() == getattr(fresh, kept)[:n].tobytes(), kept


def test_gpus_alike_in_free_milli_differ_when_one_has_no_replica_left() -> None:
    # Two time-slicing nodes with the same free milli and CPU: on n0 GPU 0 holds its 2 replicas (two
    # quarter pods), on n1 one half pod. A quarter pod can take n1's GPU 0 but not n0's.
    state = FleetState(max_gpus=4)
    for i in range(GROUP_ROWS + 8):
        spec = NodeSpec(f"n{i}", "V100", 4, 48_000, 512_000, sharing=SharingMode.TIME_SLICING, replicas=2)
        state.add_node(spec)
    quarter = PodRequest(cpu_milli=1_000, gpu_milli=250)
    state.allocate("a", 0, quarter, (0,))
    state.allocate("b", 0, quarter, (0,))
    state.allocate("c", 1, PodRequest(cpu_milli=2_000, gpu_milli=500), (0,))
    policy = AdaptiveFgdPolicy()
    rows = filter_nodes(state, quarter).rows
    scored = policy.score(state, quarter, rows)
    assert scored.gpus[0] != (0,)
    values, gpu = policy._compute(state, quarter, rows)
    one_by_one = [policy._compute_rows(state, quarter, rows[i : i + 1]) for i in range(rows.size)]
    assert values.tobytes() == np.concatenate([v for v, _ in one_by_one]).tobytes()
    assert gpu.tolist() == np.concatenate([g for _, g in one_by_one]).tolist()


def test_equal_rows_share_a_representative() -> None:
    columns = np.array([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4]], dtype=np.int64)
    groups = alike_rows(columns)
    assert groups is not None
    first, inverse = groups
    assert np.array_equal(columns[first][inverse], columns)
    assert first.size == 3
    assert inverse[0] == inverse[2] and inverse[1] == inverse[4]
    assert len({int(inverse[0]), int(inverse[1]), int(inverse[3])}) == 3


def test_distinct_rows_are_not_grouped() -> None:
    assert alike_rows(np.arange(12, dtype=np.int64).reshape(6, 2)) is None


def test_rows_that_hash_alike_but_differ_are_not_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every row hashes to 0: the check finds rows that differ, so nothing is grouped.
    monkeypatch.setattr(alike, "_multipliers", lambda n: np.zeros(n, dtype=np.int64))
    assert alike_rows(np.array([[1, 2], [1, 2], [3, 4]], dtype=np.int64)) is None


def test_columns_must_be_a_matrix() -> None:
    with pytest.raises(ValueError, match="rows x columns"):
        alike_rows(np.arange(4, dtype=np.int64))


def test_rows_alike_in_free_gpus_but_not_in_cpu_or_model_keep_values_of_their_own() -> None:
    """A node state's kept values are those of its free GPUs, free CPU and the shapes it can host: a
    node with the same free GPUs but its CPU taken, or of another model, is computed anew."""
    state = FleetState(max_gpus=8)
    for name, gpu_model in (("a", "A100"), ("b", "A100"), ("t", "T4")):
        state.add_node(NodeSpec(name, gpu_model, 8, 64_000, 512_000))
    shapes = [PodRequest(cpu_milli=8_000, gpus=1), PodRequest(cpu_milli=8_000, gpus=1, gpu_models=("T4",))]
    typical = TypicalWorkload.from_requests(shapes)
    model = FragmentationModel(typical, by_capacity=True)
    model.sync(state)
    for row in range(3):
        model.refresh(state, row)
    state.allocate("cpu-hog", 1, PodRequest(cpu_milli=60_000), ())
    model.refresh(state, 1)
    fresh = FragmentationModel(typical, by_capacity=True)
    fresh.sync(state)
    assert model.frag[:3].tolist() == fresh.frag[:3].tolist()
    assert len(set(model.frag[:3].tolist())) == 3, "free CPU and the GPU model both count"
