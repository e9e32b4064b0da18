"""Each scoring policy's choice on tiny hand-made fleets."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.api.errors import GpuFleetError
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.scheduler.placement.policies import POLICIES, POLICY_NAMES, get_policy
from gpufleet.scheduler.placement.score_fgd import PodShape, TypicalWorkload
from gpufleet.scheduler.placement.scoring import Scored, ScorePolicy, pick, whole_gpus


def fleet(*gpus: int, cpu: int = 32_000, nvlink: tuple[tuple[int, ...], ...] | None = None) -> FleetState:
    state = FleetState()
    for i, count in enumerate(gpus):
        spec = NodeSpec(f"n{i}", "T4", count, cpu, 65_536, nvlink_domains=nvlink)
        state.add_node(spec)
    return state


def place(
    state: FleetState, policy: ScorePolicy, pod: str, request: PodRequest, seed: int = 0
) -> tuple[int, tuple[int, ...]]:
    rows = filter_nodes(state, request).rows
    scored = policy.score(state, request, rows)
    index = pick(scored, np.random.default_rng(seed))
    row, gpus = int(rows[index]), scored.gpus[index]
    state.allocate(pod, row, request, gpus)
    policy.observe(state, row)
    policy.learn(request)
    return row, gpus


def observe_all(state: FleetState, policy: ScorePolicy) -> None:
    for row in state.rows():
        policy.observe(state, row)


SHARE = PodRequest(cpu_milli=1_000, memory_mib=1_024, gpu_milli=500)
ONE = PodRequest(cpu_milli=1_000, memory_mib=1_024, gpus=1)


def test_registry_knows_every_documented_policy_and_rejects_others() -> None:
    # The order tables and plots show them in.
    assert POLICY_NAMES == ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "fgd+", "spread")
    assert tuple(POLICIES) == POLICY_NAMES
    for name in POLICY_NAMES:
        config = {"typical": TypicalWorkload.from_requests([ONE])} if name == "fgd" else {}
        assert get_policy(name, seed=1, **config).name == name
    with pytest.raises(GpuFleetError, match=r"valid: .*bestfit"):
        get_policy("no-such-policy")


def test_pick_breaks_ties_at_random_but_never_picks_a_lower_score() -> None:
    scored = Scored(np.array([1.0, 3.0, 3.0, 2.0]), [(), (), (), ()])
    picks = {pick(scored, np.random.default_rng(seed)) for seed in range(40)}
    assert picks == {1, 2}


def test_pick_with_a_node_order_takes_the_first_tied_node_in_that_order() -> None:
    scored = Scored(np.array([1.0, 3.0, 3.0, 2.0, 3.0]), [()] * 5)
    rank = np.array([0, 7, 4, 1, 5], dtype=np.int64)
    # Index 0 and 3 come first in the order but score lower; among the best (1, 2, 4), 2 ranks first.
    assert {pick(scored, np.random.default_rng(seed), rank) for seed in range(20)} == {2}


def test_bestfit_prefers_the_fuller_node_and_the_tightest_gpu() -> None:
    state = fleet(2, 2)
    state.allocate("a", 1, SHARE, (1,))
    policy = get_policy("bestfit")
    row, gpus = place(state, policy, "b", PodRequest(cpu_milli=1_000, gpu_milli=300))
    assert (row, gpus) == (1, (1,))


def test_packing_fills_shared_gpus_before_idle_nodes() -> None:
    state = fleet(4, 4)
    state.allocate("a", 0, SHARE, (2,))
    row, gpus = place(state, get_policy("packing"), "b", PodRequest(cpu_milli=1_000, gpu_milli=400))
    assert (row, gpus) == (0, (2,))


def test_spread_prefers_the_emptier_node_and_the_emptiest_gpu() -> None:
    state = fleet(2, 2)
    state.allocate("a", 0, SHARE, (0,))
    row, gpus = place(state, get_policy("spread"), "b", SHARE)
    assert row == 1
    state.allocate("c", 1, ONE, (1,))
    row, gpus = place(state, get_policy("spread"), "d", PodRequest(cpu_milli=1, gpu_milli=100))
    assert gpus == (1,) and row == 0


def test_clustering_groups_pods_of_the_same_class() -> None:
    state = fleet(4, 4, 4)
    policy = get_policy("clustering")
    state.allocate("share", 0, SHARE, (0,))
    state.allocate("whole", 1, ONE, (0,))
    observe_all(state, policy)
    assert place(state, policy, "s2", SHARE)[0] == 0
    assert place(state, policy, "w2", ONE)[0] == 1


def test_dotprod_prefers_the_node_with_less_free_gpu() -> None:
    state = fleet(4, 2)
    assert place(state, get_policy("dotprod"), "p", ONE)[0] == 1


def test_random_spreads_over_feasible_nodes_and_fitting_gpus() -> None:
    rows, gpus = set(), set()
    for seed in range(30):
        state = fleet(2, 2, 2)
        state.allocate("full", 2, PodRequest(gpus=2), (0, 1))
        policy = get_policy("random", seed=seed)
        row, chosen = place(state, policy, "p", SHARE, seed=seed)
        rows.add(row)
        gpus.add(chosen)
    assert rows == {0, 1}
    assert gpus == {(0,), (1,)}


def test_random_draws_its_node_itself_so_a_fixed_tie_order_does_not_bias_it() -> None:
    state = fleet(2, 2, 2, 2)
    rows = filter_nodes(state, ONE).rows
    rank = np.arange(rows.size, dtype=np.int64)
    chosen = set()
    for seed in range(40):
        scored = get_policy("random", seed=seed).score(state, ONE, rows)
        assert np.count_nonzero(scored.scores == scored.scores.max()) == 1
        chosen.add(int(rows[pick(scored, np.random.default_rng(0), rank)]))
    assert chosen == {0, 1, 2, 3}


CPU_ONLY = PodRequest(cpu_milli=10_000, memory_mib=1_024)


@pytest.mark.parametrize("name", ["packing", "clustering"])
def test_packing_and_clustering_give_a_cpu_only_pod_the_same_score_everywhere(name: str) -> None:
    # The reference plugins return their minimum score for a pod without GPUs: the tie-break decides.
    state = fleet(2, 2, 8)
    state.allocate("a", 1, SHARE, (0,))
    policy = get_policy(name)
    observe_all(state, policy)
    scored = policy.score(state, CPU_ONLY, filter_nodes(state, CPU_ONLY).rows)
    assert np.all(scored.scores == scored.scores[0])
    rank = np.array([2, 0, 1], dtype=np.int64)
    assert pick(scored, np.random.default_rng(0), rank) == 1


def test_fgd_keeps_a_cpu_only_pod_off_nodes_whose_cpu_the_typical_pod_needs() -> None:
    # Typical pod: 8 cores and one whole GPU. Node 0 has 16 cores: 10 taken leaves 6, and both its idle
    # GPUs become unusable (fragmentation +2000). Node 1 has 64 cores: nothing changes (the neutral
    # score, 50). Node 2's GPUs are all in use: no idle GPU to strand, also 50.
    typical = TypicalWorkload((PodShape(8_000, 1_000, 1),), (1.0,))
    state = FleetState()
    for i, cpu in enumerate((16_000, 64_000, 64_000)):
        state.add_node(NodeSpec(f"n{i}", "T4", 2, cpu, 65_536))
    state.allocate("full", 2, PodRequest(cpu_milli=1_000, gpus=2), (0, 1))
    policy = get_policy("fgd", typical=typical)
    observe_all(state, policy)
    rows = filter_nodes(state, CPU_ONLY).rows
    scores = policy.score(state, CPU_ONLY, rows).scores
    assert scores.tolist() == [int(100 / (1 + np.exp(2.0))), 50.0, 50.0]
    rank = np.array([0, 2, 1], dtype=np.int64)
    assert pick(policy.score(state, CPU_ONLY, rows), np.random.default_rng(0), rank) == 2


def test_fgd_avoids_stranding_a_gpu_share() -> None:
    # The typical pod asks for 600 milli. Node 0's GPU has 700 free: a 500 pod there would strand 200.
    # Node 1's GPU has 500 free, already useless to the typical pod: the pod fills it exactly.
    typical = TypicalWorkload((PodShape(1_000, 600, 1),), (1.0,))
    state = fleet(1, 1)
    state.allocate("a", 0, PodRequest(cpu_milli=1, gpu_milli=300), (0,))
    state.allocate("b", 1, PodRequest(cpu_milli=1, gpu_milli=500), (0,))
    policy = get_policy("fgd", typical=typical, integer_scores=False)
    observe_all(state, policy)
    assert place(state, policy, "p", SHARE)[0] == 1


def test_fgd_keeps_whole_gpus_free_for_multi_gpu_pods() -> None:
    typical = TypicalWorkload((PodShape(1_000, 1_000, 2),), (1.0,))
    state = fleet(2, 3)
    policy = get_policy("fgd", typical=typical, integer_scores=False)
    # On the 3-GPU node one GPU would be left alone (stranded for 2-GPU pods) only if we took one there;
    # taking one from the 2-GPU node strands its other GPU. Taking from the 3-GPU node leaves 2 usable.
    assert place(state, policy, "p", ONE)[0] == 1


def test_fgd_share_gpu_choice_matches_brute_force() -> None:
    typical = TypicalWorkload.from_counts({PodShape(500, 250, 1): 2, PodShape(500, 1_000, 1): 1})
    state = fleet(4)
    for i, (milli, gpu) in enumerate([(300, 0), (600, 1), (100, 2)]):
        state.allocate(f"x{i}", 0, PodRequest(cpu_milli=1, gpu_milli=milli), (gpu,))
    policy = get_policy("fgd", typical=typical, integer_scores=False)
    rows = filter_nodes(state, SHARE).rows
    scored = policy.score(state, SHARE, rows)

    def frag(free: list[int]) -> float:
        total = sum(free)
        out = 0.0
        for shape, weight in zip(typical.shapes, typical.weights, strict=True):
            fits = sum(f >= shape.gpu_milli for f in free) >= shape.gpus
            out += weight * (sum(f for f in free if f < shape.gpu_milli) if fits else total)
        return out

    free = [700, 400, 900, 1000]
    gains = {g: frag(free) - frag([f - 500 if i == g else f for i, f in enumerate(free)]) for g in (0, 2, 3)}
    best = max(gains.values())
    assert scored.scores[0] == pytest.approx(best)
    assert scored.gpus[0][0] == min(g for g, v in gains.items() if v == best)


def test_whole_gpus_stay_inside_one_nvlink_domain() -> None:
    state = fleet(4, nvlink=((0, 1), (2, 3)))
    state.allocate("a", 0, ONE, (0,))
    # Domain (0, 1) has one free GPU, (2, 3) two: a 2-GPU pod takes 2 and 3, not the lowest 1 and 2.
    assert whole_gpus(state, 0, 2) == (2, 3)
    # A single GPU goes to the fullest domain that fits, keeping (2, 3) whole.
    assert whole_gpus(state, 0, 1) == (1,)


def test_fgd_plus_learns_the_workload_online() -> None:
    state = fleet(2, 2, 2, 2)
    policy = get_policy("fgd+")
    for i in range(24):
        place(state, policy, f"p{i}", PodRequest(cpu_milli=1_000, gpu_milli=250), seed=i)
    shapes = policy.estimate.typical().shapes  # type: ignore[attr-defined]
    assert shapes[0] == PodShape(1_000, 250, 1)
    state.check_invariants()
    # 24 quarter-GPU pods need 6 GPUs; packed, two GPUs stay whole for a later whole-GPU pod.
    assert int((state.usable_gpu_free() == 1_000).sum()) == 2
