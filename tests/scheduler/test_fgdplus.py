"""`fgd+` keeps per-node scores across pods and cycles: they must equal scores computed afresh."""

from __future__ import annotations

import copy

import numpy as np
import numpy.typing as npt
import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import AllocationError, FleetState
from gpufleet.fleet.touched import TouchedRows
from gpufleet.scheduler.placement.filters import filter_nodes
from gpufleet.scheduler.placement.gpus import choose_gpus
from gpufleet.scheduler.placement.score_fgd import DIRTY_LIMIT, FragmentationModel
from gpufleet.scheduler.placement.score_fgdplus import AdaptiveFgdPolicy
from gpufleet.scheduler.placement.scoring import Scored, pick
from gpufleet.sim.throughput import STREAM_CLASSES, ThroughputConfig

REQUESTS = (
    PodRequest(cpu_milli=8_000, gpus=1),
    PodRequest(cpu_milli=20_000, gpus=2),
    PodRequest(cpu_milli=40_000, gpus=4),
    PodRequest(cpu_milli=64_000, gpus=8),
    PodRequest(cpu_milli=2_000, gpu_milli=250),
    PodRequest(cpu_milli=4_000, gpu_milli=500),
    PodRequest(cpu_milli=6_000),
)


def racked_fleet(nodes: int, per_rack: int) -> FleetState:
    state = FleetState(("rack",), max_gpus=8)
    for i in range(nodes):
        spec = NodeSpec(f"n{i}", "H100-80GB", 8, 96_000, 1_024_000, labels={"rack": f"r{i // per_rack}"})
        state.add_node(spec)
    return state


def afresh(policy: AdaptiveFgdPolicy) -> AdaptiveFgdPolicy:
    """The same policy (same typical workload and CPU ratio) with nothing kept per node."""
    fresh = copy.deepcopy(policy)
    fresh.model = FragmentationModel(policy.model.typical, by_capacity=policy.model.by_capacity)
    fresh._scores = {}
    fresh._state = None
    return fresh


def scored_as_afresh(
    policy: AdaptiveFgdPolicy, state: FleetState, request: PodRequest
) -> tuple[npt.NDArray[np.intp], Scored] | None:
    """The rows that fit `request` and the policy's scores of them, checked against the same policy with
    nothing kept per node (None when no row fits)."""
    rows = filter_nodes(state, request).rows
    if not rows.size:
        return None
    kept = policy.score(state, request, rows)
    fresh = afresh(policy).score(state, request, rows)
    np.testing.assert_allclose(kept.scores, fresh.scores, rtol=1e-12, atol=1e-9)
    assert list(kept.gpus) == list(fresh.gpus)
    return rows, kept


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_scores_equal_scores_computed_afresh(seed: int) -> None:
    rng = np.random.default_rng(seed)
    state = racked_fleet(12, 4)
    policy = AdaptiveFgdPolicy(first_refit=4)
    running: list[str] = []
    for step in range(400):
        request = REQUESTS[int(rng.integers(len(REQUESTS)))]
        scored = scored_as_afresh(policy, state, request)
        if scored is not None:
            rows, kept = scored
            index = pick(kept, rng)
            row = int(rows[index])
            state.allocate(f"p{step}", row, request, kept.gpus[index])
            policy.observe(state, row)
            policy.learn(request)
            running.append(f"p{step}")
        if running and rng.random() < 0.45:
            pod = running.pop(int(rng.integers(len(running))))
            behind_its_back = rng.random() < 0.2
            alloc = state.release(pod)
            if behind_its_back:
                # The world changed the fleet between two cycles; the next cycle starts with invalidate.
                policy.invalidate()
            else:
                policy.observe(state, alloc.node)
    state.check_invariants()


@pytest.mark.parametrize(
    ("seed", "journal", "moves"), [(0, 2, 4), (1, 2, 4), (2, 1 << 16, 4), (3, 1 << 16, 4), (4, 1 << 16, 40)]
)
def test_rows_changed_behind_its_back_are_found_from_the_fleets_journal(
    seed: int, journal: int, moves: int
) -> None:
    # Between two cycles the world places, releases and fails GPUs without telling the policy; the next
    # cycle's `invalidate` finds those rows from the fleet's journal of touched rows, or by comparing
    # every row when the journal (here as short as 2 entries) dropped some of them. A few rows written
    # are recomputed at once; more (up to 40 moves) are compared first (`score_fgd.FEW_ROWS`).
    rng = np.random.default_rng(seed)
    state = racked_fleet(10, 5)
    state.touched = TouchedRows(limit=journal)
    policy = AdaptiveFgdPolicy(first_refit=4)
    running: list[str] = []
    for step in range(200):
        scored_as_afresh(policy, state, REQUESTS[int(rng.integers(len(REQUESTS)))])
        for k in range(int(rng.integers(0, moves))):
            move = rng.random()
            if running and move < 0.4:
                state.release(running.pop(int(rng.integers(len(running)))))
            elif move < 0.8:
                pod = f"w{step}.{k}"
                place_any(state, pod, REQUESTS[int(rng.integers(len(REQUESTS)))], rng)
                if pod in state.allocations:
                    running.append(pod)
            else:
                node = state.names[int(rng.integers(state.n_rows))]
                state.set_gpu_health(node, int(rng.integers(8)), bool(rng.random() < 0.5))
        policy.invalidate()
    state.check_invariants()


def test_the_journal_says_which_rows_were_written_since_a_mark_or_that_it_forgot() -> None:
    journal = TouchedRows(limit=4)
    start = journal.mark()
    for row in (3, 1, 3):
        journal.add(row)
    assert journal.since(start) == [3, 1, 3]
    middle = journal.mark()
    journal.add(7)
    assert journal.since(middle) == [7]
    journal.add(2)
    journal.add(5)  # five entries: the oldest half goes
    assert journal.since(start) is None
    assert journal.since(middle) == [7, 2, 5]
    assert journal.since(journal.mark()) == []
    with pytest.raises(ValueError, match="limit"):
        TouchedRows(limit=1)


def test_whole_node_pods_without_topology_fill_the_rack_already_in_use() -> None:
    state = racked_fleet(8, 4)
    policy = AdaptiveFgdPolicy()
    node = PodRequest(cpu_milli=16_000, gpus=8)
    state.allocate("resident", 5, node, tuple(range(8)))  # rack r1 (n4-n7) is in use
    policy.invalidate()
    chosen = []
    for i in range(3):
        rows = filter_nodes(state, node).rows
        scored = policy.score(state, node, rows)
        row = int(rows[pick(scored, np.random.default_rng(i))])
        state.allocate(f"w{i}", row, node, scored.gpus[0])
        policy.observe(state, row)
        chosen.append(state.names[row])
    # r1's three free nodes are taken before any of r0, which stays whole for a gang requiring a rack.
    assert sorted(chosen) == ["n4", "n6", "n7"]


def test_throughput_bench_runs_the_default_policy_of_each_streams_class() -> None:
    from gpufleet.scheduler.config import SchedulerConfig

    defaults = SchedulerConfig()
    assert ThroughputConfig().policies() == {s: defaults.policy_for(c) for s, c in STREAM_CLASSES.items()}
    assert set(ThroughputConfig(policy="bestfit").policies().values()) == {"bestfit"}


def test_changes_observed_while_nothing_is_scored_are_bounded_and_still_seen() -> None:
    # A policy whose classes are not being placed still observes every change; it keeps a bounded
    # record of them and scores correctly when asked again.
    state = racked_fleet(4, 2)
    policy = AdaptiveFgdPolicy()
    one = REQUESTS[0]
    policy.score(state, one, filter_nodes(state, one).rows)
    for i in range(DIRTY_LIMIT + 10):
        state.allocate(f"p{i}", i % 4, one, (i // 4 % 8,))
        policy.observe(state, i % 4)
        state.release(f"p{i}")
        policy.observe(state, i % 4)
    assert len(policy.model._dirty) <= DIRTY_LIMIT
    state.allocate("last", 2, one, (0,))
    policy.observe(state, 2)
    rows = filter_nodes(state, one).rows
    np.testing.assert_allclose(
        policy.score(state, one, rows).scores, afresh(policy).score(state, one, rows).scores
    )


SHARING_MODES = (SharingMode.DYNAMIC, SharingMode.TIME_SLICING, SharingMode.MPS, SharingMode.EXCLUSIVE)


def add_mixed_node(state: FleetState, rng: np.random.Generator) -> None:
    i = state.n_rows
    mode = SHARING_MODES[int(rng.integers(len(SHARING_MODES)))]
    labels = {"rack": f"r{i % 3}"}
    spec = NodeSpec(f"n{i}", "H100-80GB", 8, 96_000, 1_024_000, labels=labels, sharing=mode, replicas=3)
    state.add_node(spec)


def place_any(state: FleetState, pod: str, request: PodRequest, rng: np.random.Generator) -> None:
    rows = filter_nodes(state, request).rows
    if rows.size:
        row = int(rows[int(rng.integers(rows.size))])
        state.allocate(pod, row, request, choose_gpus(state, row, request).gpus)


def split_behind_its_back(state: FleetState, running: list[str], rng: np.random.Generator, tag: str) -> None:
    """The world ends a half-GPU pod and starts two quarter pods on the same GPU: the node's free milli
    and CPU are as before, its GPU holds one more pod."""
    halves = [pod for pod in running if state.allocations[pod].milli == 500]
    if not halves:
        return
    pod = halves[int(rng.integers(len(halves)))]
    running.remove(pod)
    alloc = state.release(pod)
    for k in range(2):
        try:
            state.allocate(f"{tag}.{k}", alloc.node, REQUESTS[4], alloc.gpus)
        except (AllocationError, ValueError):
            return  # out of replicas: then the free milli differs, which is also fine to test
        running.append(f"{tag}.{k}")


@pytest.mark.parametrize("seed", range(8))
def test_kept_scores_equal_scores_computed_afresh_with_mixed_sharing_modes(seed: int) -> None:
    # Time-slicing and MPS GPUs take share pods up to their replicas: a GPU's pod count matters to a
    # share pod's score as much as its free milli. Between cycles the world releases and places pods
    # without telling the policy (it only gets `invalidate`), often on the same GPUs with the same totals.
    rng = np.random.default_rng(seed)
    state = FleetState(("rack",), max_gpus=8)
    for _ in range(6):
        add_mixed_node(state, rng)
    policy = AdaptiveFgdPolicy(first_refit=4)
    running: list[str] = []
    for step in range(300):
        request = REQUESTS[int(rng.integers(len(REQUESTS)))]
        scored = scored_as_afresh(policy, state, request)
        if scored is not None:
            rows, kept = scored
            index = pick(kept, rng)
            row = int(rows[index])
            state.allocate(
                f"p{step}", row, request, choose_gpus(state, row, request, proposed=kept.gpus[index]).gpus
            )
            policy.observe(state, row)
            policy.learn(request)
            running.append(f"p{step}")
        if running and rng.random() < 0.3:
            alloc = state.release(running.pop(int(rng.integers(len(running)))))
            policy.observe(state, alloc.node)
        if rng.random() < 0.15:
            # Between two cycles: the world ends pods and starts others on its own.
            for k in range(int(rng.integers(1, 4))):
                move = rng.random()
                if running and move < 0.3:
                    state.release(running.pop(int(rng.integers(len(running)))))
                elif move < 0.7:
                    split_behind_its_back(state, running, rng, f"w{step}.{k}")
                else:
                    pod = f"w{step}.{k}"
                    place_any(state, pod, REQUESTS[4 + int(rng.integers(2))], rng)
                    if pod in state.allocations:
                        running.append(pod)
            policy.invalidate()
    state.check_invariants()


def test_a_gpu_out_of_replicas_is_seen_after_invalidate_though_milli_and_cpu_are_as_before() -> None:
    state = FleetState(max_gpus=2)
    for i in range(2):
        state.add_node(
            NodeSpec(f"n{i}", "H100-80GB", 2, 32_000, 512_000, sharing=SharingMode.TIME_SLICING, replicas=2)
        )
    quarter = PodRequest(cpu_milli=1_000, gpu_milli=250)
    state.allocate("A", 0, PodRequest(cpu_milli=2_000, gpu_milli=500), (0,))
    state.allocate("E", 1, PodRequest(cpu_milli=1_000, gpu_milli=400), (0,))
    policy = AdaptiveFgdPolicy()
    policy.score(state, quarter, filter_nodes(state, quarter).rows)
    # The world ends A and runs two quarter pods on n0's GPU 0: the same free milli and CPU, but the GPU
    # now holds its 2 replicas and can take no more share pods.
    state.release("A")
    state.allocate("B", 0, quarter, (0,))
    state.allocate("C", 0, quarter, (0,))
    policy.invalidate()
    rows = filter_nodes(state, quarter).rows
    kept = policy.score(state, quarter, rows)
    n0 = int(np.flatnonzero(rows == 0)[0])
    assert kept.gpus[n0] == (1,)
    np.testing.assert_allclose(kept.scores, afresh(policy).score(state, quarter, rows).scores)


def whole_node_choices(state: FleetState, draws: int = 20) -> set[str]:
    """The nodes fgd+ picks for one whole-node pod, over `draws` tie-break draws."""
    node = PodRequest(cpu_milli=16_000, gpus=8)
    rows = filter_nodes(state, node).rows
    scored = AdaptiveFgdPolicy().score(state, node, rows)
    return {state.names[int(rows[pick(scored, np.random.default_rng(i))])] for i in range(draws)}


def test_each_node_is_judged_by_the_finest_level_at_which_it_has_a_domain() -> None:
    # Levels end with `clique` (the Kubernetes defaults), which only GB200-like nodes carry.
    state = FleetState(("rack", "clique"), max_gpus=8)
    racks = {"a0": "r0", "a1": "r0", "b0": "r1", "b1": "r1", "c0": "r2", "c1": "r2", "lone": None}
    for name, rack in racks.items():
        labels = {} if rack is None else {"rack": rack}
        if name.startswith("c"):
            labels["clique"] = f"q-{name}"  # a clique of one node each, inside rack r2
        state.add_node(NodeSpec(name, "H100-80GB", 8, 96_000, 1_024_000, labels=labels))
    state.allocate("resident", 0, PodRequest(cpu_milli=16_000, gpus=8), tuple(range(8)))
    # a1 is in the only rack in use; the empty rack r1, the unlabelled node and the empty cliques lose.
    assert whole_node_choices(state) == {"a1"}


def test_a_node_without_topology_labels_is_a_domain_of_its_own_not_an_empty_one() -> None:
    state = FleetState(("rack",), max_gpus=8)
    for name, labels in (("b0", {"rack": "r1"}), ("b1", {"rack": "r1"}), ("lone", {})):
        state.add_node(NodeSpec(name, "H100-80GB", 8, 96_000, 1_024_000, labels=labels))
    half = PodRequest(cpu_milli=8_000, gpus=4)
    state.allocate("on-b1", 1, half, (0, 1, 2, 3))
    state.allocate("on-lone", 2, half, (0, 1, 2, 3))
    # b1 and lone are equal on fragmentation and fill level; lone, half used, is fuller as a domain of
    # one than rack r1 (a quarter used), so it takes the pod and r1 keeps more of its GPUs whole.
    rows = filter_nodes(state, half).rows
    scored = AdaptiveFgdPolicy().score(state, half, rows)
    assert {state.names[int(rows[pick(scored, np.random.default_rng(i))])] for i in range(20)} == {"lone"}


def test_the_rack_tie_break_never_outweighs_a_difference_in_node_fullness() -> None:
    state = racked_fleet(6, 2)  # racks r0 (n0, n1), r1 (n2, n3), r2 (n4, n5)
    node = PodRequest(cpu_milli=16_000, gpus=8)
    for row in (2, 3, 5):
        state.allocate(f"full{row}", row, node, tuple(range(8)))  # r1 full, r2 half
    state.allocate("sidecar", 0, PodRequest(cpu_milli=50), ())  # n0 is fuller than n4 by 0.05 CPU
    one = REQUESTS[0]
    rows = filter_nodes(state, one).rows
    scored = AdaptiveFgdPolicy().score(state, one, rows)
    assert state.names[int(rows[int(np.argmax(scored.scores))])] == "n0"


def test_the_rack_tie_break_counts_a_racks_healthy_gpus_after_a_failure() -> None:
    state = racked_fleet(4, 2)  # racks r0 (n0, n1), r1 (n2, n3)
    state.allocate("on-n1", 1, PodRequest(cpu_milli=8_000, gpus=2), (0, 1))
    state.allocate("on-n3", 3, PodRequest(cpu_milli=8_000, gpus=4), (0, 1, 2, 3))
    policy = AdaptiveFgdPolicy()
    node = PodRequest(cpu_milli=16_000, gpus=8)

    def chosen() -> set[str]:
        rows = filter_nodes(state, node).rows
        scored = policy.score(state, node, rows)
        return {state.names[int(rows[pick(scored, np.random.default_rng(i))])] for i in range(20)}

    # r1 is a quarter used, r0 an eighth: the empty node of r1 takes a whole-node pod.
    assert chosen() == {"n2"}
    for gpu in (4, 5, 6, 7):
        state.set_gpu_health("n1", gpu, False)
    policy.invalidate()
    # r0's 12 healthy GPUs, 10 of them whole and free (a sixth used), against r1's 12 of 16 (a
    # quarter): r1 is still the fuller. Counting n1's failed GPUs as r0's would make r0 (10 of 16
    # free) look fuller.
    assert chosen() == {"n2"}
    for gpu in (4, 5, 6, 7):
        state.set_gpu_health("n1", gpu, True)
    state.allocate("more-on-n1", 1, PodRequest(cpu_milli=8_000, gpus=4), (2, 3, 4, 5))
    policy.invalidate()
    assert chosen() == {"n0"}  # r0 now has 6 of 16 GPUs in use
