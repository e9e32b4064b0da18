"""Where FGD and `fgd+` try a sharing pod on a node: one GPU per distinct free milli, the best of them."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.score_fgd import (
    SCALAR_BEST_ROWS,
    FragmentationModel,
    TypicalWorkload,
    best_per_row,
)

HALF = PodRequest(cpu_milli=2_000, gpu_milli=500)
QUARTER = PodRequest(cpu_milli=1_000, gpu_milli=250)


def test_a_share_pod_is_tried_on_the_first_gpu_of_each_free_milli_that_can_take_it() -> None:
    state = FleetState(max_gpus=6)
    state.add_node(NodeSpec("n0", "A100", 6, 64_000, 512_000))
    state.allocate("a", 0, HALF, (1,))
    state.allocate("b", 0, HALF, (3,))
    state.allocate("c", 0, HALF, (4,))
    state.allocate("d", 0, HALF, (4,))  # GPU 4 is full: no candidate
    # Free milli per GPU: 1000, 500, 1000, 500, 0, 1000.
    model = FragmentationModel(TypicalWorkload.from_requests([HALF, QUARTER]))
    rows = np.array([0], dtype=np.intp)
    cand_row, cand_gpu, gains = model.share_gains(state, HALF, rows)
    assert cand_row.tolist() == [0, 0]
    assert cand_gpu.tolist() == [0, 1]
    assert gains.shape == (2,)
    # The same node twice in one batch (the vectorised path): the same candidates and gains per row.
    batch_row, batch_gpu, batch_gains = model.share_gains(state, HALF, np.array([0, 0], dtype=np.intp))
    assert batch_row.tolist() == [0, 0, 1, 1]
    assert batch_gpu.tolist() == [0, 1, 0, 1]
    assert batch_gains.tobytes() == np.concatenate([gains, gains]).tobytes()


@pytest.mark.parametrize("count", [3, SCALAR_BEST_ROWS + 3])  # the Python loop and the numpy grid
def test_the_best_candidate_per_row_is_the_lowest_gpu_among_equal_values(count: int) -> None:
    # Candidates in any order; row 1 has none.
    cand_row = np.array([0, 2, 0, 0, 2, 2], dtype=np.int64)
    cand_gpu = np.array([5, 4, 1, 3, 6, 7], dtype=np.int64)
    values = np.array([7.5, -1.0, 2.0, 7.5, -3.0, -1.0])
    best, gpu = best_per_row(count, cand_row, cand_gpu, values)
    assert best.tolist() == [7.5, -np.inf, -1.0] + [-np.inf] * (count - 3)
    assert gpu.tolist() == [3, 0, 4] + [0] * (count - 3)
