"""Random sequences of fleet changes never allocate anything twice or beyond capacity.

A hypothesis rule-based machine adds and removes nodes, allocates (sometimes deliberately invalid
requests, which must change nothing), releases, fails and heals GPUs, cordons nodes and runs whole gang
placements inside statements that are then discarded or committed. After every step the fleet's own
`check_invariants` runs, and an independent recount checks that no GPU, share or MIG instance is held
twice.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import GPU_MILLI, PodRequest
from gpufleet.fleet.state import AllocationError, FleetState
from gpufleet.scheduler.placement import place_workload
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.scheduler.statement import Statement
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

MIG_LAYOUTS = (
    ("3g.40gb", "3g.40gb"),
    ("3g.40gb", "2g.20gb", "1g.10gb"),
    ("1g.10gb",) * 7,
    ("7g.80gb",),
    ("4g.40gb", "2g.20gb", "1g.10gb"),
)
MODES = (
    SharingMode.DYNAMIC,
    SharingMode.EXCLUSIVE,
    SharingMode.TIME_SLICING,
    SharingMode.MPS,
    SharingMode.MIG,
)


def _snapshot(state: FleetState) -> tuple[bytes, ...]:
    arrays = [
        getattr(state, n).tobytes() for n in ("cpu_free", "mem_free", "gpu_free", "gpu_pods", "whole_free")
    ]
    arrays.append(state.mig_free.tobytes())
    arrays.extend(t.tobytes() for t in state.domain_whole_free)
    arrays.append(repr(sorted(state.allocations.items())).encode())
    return tuple(arrays)


class FleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = FleetState(("block", "rack"), max_gpus=4, capacity=2)
        self.next_node = 0
        self.next_pod = 0
        self.policy = get_policy("bestfit")
        self.rng = np.random.default_rng(0)

    @initialize()
    def seed_fleet(self) -> None:
        # A few nodes of every mode so that most steps have something to work on.
        for mode, layout in zip(MODES, MIG_LAYOUTS, strict=True):
            self.add_node(8, mode, 2, layout, self.next_node % 4, self.next_node % 2 == 0, [])

    @rule(
        gpus=st.integers(0, 8),
        mode=st.sampled_from(MODES),
        replicas=st.integers(1, 4),
        layout=st.sampled_from(MIG_LAYOUTS),
        rack=st.integers(0, 3),
        split=st.booleans(),
        unhealthy=st.lists(st.integers(0, 7), max_size=2),
    )
    def add_node(
        self,
        gpus: int,
        mode: SharingMode,
        replicas: int,
        layout: tuple[str, ...],
        rack: int,
        split: bool,
        unhealthy: list[int],
    ) -> None:
        name = f"n{self.next_node}"
        self.next_node += 1
        half = gpus // 2
        nvlink = (tuple(range(half)), tuple(range(half, gpus))) if split and half else None
        spec = NodeSpec(
            name=name,
            gpu_model="H100-80GB",
            gpus=gpus,
            cpu_milli=32_000,
            memory_mib=256_000,
            labels={"block": f"b{rack // 2}", "rack": f"r{rack}"},
            nvlink_domains=nvlink,
            sharing=mode,
            replicas=replicas,
            mig_layouts={g: layout for g in range(gpus)} if mode is SharingMode.MIG else {},
            unhealthy_gpus=tuple(sorted({g for g in unhealthy if g < gpus})),
        )
        self.state.add_node(spec)

    @precondition(lambda self: self.state.n_rows > 0)
    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        state = self.state
        row = data.draw(st.sampled_from(range(state.n_rows)))
        kind = data.draw(st.sampled_from(("whole", "share", "mig", "none")))
        cpu = data.draw(st.sampled_from((0, 1000, 8000, 40_000)))
        count = int(state.gpu_count[row])
        gpus: tuple[int, ...] = ()
        mig_gpu = None
        if kind == "whole":
            n = data.draw(st.integers(1, 4))
            request = PodRequest(gpus=n, cpu_milli=cpu)
            # Mostly a choice among free GPUs, sometimes anything (which must then be refused).
            free = [g for g in range(count) if state.gpu_free[row, g] == GPU_MILLI and state.gpu_ok[row, g]]
            if data.draw(st.booleans()) or len(free) < n:
                gpus = tuple(data.draw(st.lists(st.integers(0, max(count, 1)), min_size=n, max_size=n)))
            else:
                gpus = tuple(data.draw(st.permutations(free))[:n])
        elif kind == "share":
            request = PodRequest(gpu_milli=data.draw(st.sampled_from((100, 250, 500, 999))), cpu_milli=cpu)
            gpus = (data.draw(st.integers(0, max(count, 1))),)
        elif kind == "mig":
            request = PodRequest(
                mig=data.draw(st.sampled_from(("3g.40gb", "1g.10gb", "7g.80gb"))), cpu_milli=cpu
            )
            mig_gpu = data.draw(st.one_of(st.none(), st.integers(0, max(count, 1))))
        else:
            request = PodRequest(cpu_milli=cpu)
        before = _snapshot(state)
        pod = f"p{self.next_pod}"
        self.next_pod += 1
        try:
            state.allocate(pod, row, request, gpus, mig_gpu=mig_gpu)
        except AllocationError:
            assert _snapshot(state) == before, "a refused allocation changed the fleet"

    @precondition(lambda self: bool(self.state.allocations))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        pod = data.draw(st.sampled_from(sorted(self.state.allocations)))
        self.state.release(pod)

    @precondition(lambda self: bool(self.state.index))
    @rule(data=st.data(), healthy=st.booleans())
    def gpu_health(self, data: st.DataObject, healthy: bool) -> None:
        name = data.draw(st.sampled_from(sorted(self.state.index)))
        count = int(self.state.gpu_count[self.state.index[name]])
        if count:
            self.state.set_gpu_health(name, data.draw(st.integers(0, count - 1)), healthy)

    @precondition(lambda self: bool(self.state.index))
    @rule(data=st.data())
    def remove_node(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.state.index)))
        held = self.state.pods_on(name)
        assert self.state.remove_node(name) == held
        assert not any(pod in self.state.allocations for pod in held)

    @precondition(lambda self: bool(self.state.index))
    @rule(data=st.data(), schedulable=st.booleans())
    def cordon(self, data: st.DataObject, schedulable: bool) -> None:
        self.state.set_schedulable(data.draw(st.sampled_from(sorted(self.state.index))), schedulable)

    @rule(
        count=st.integers(1, 4),
        minimum=st.integers(1, 4),
        shape=st.sampled_from(("whole", "share", "mig")),
        level=st.sampled_from((None, "rack", "block", "host", "nvlink")),
        commit=st.booleans(),
        evict=st.booleans(),
    )
    def place_gang(
        self, count: int, minimum: int, shape: str, level: str | None, commit: bool, evict: bool
    ) -> None:
        request = {
            "whole": PodRequest(gpus=2, cpu_milli=1000),
            "share": PodRequest(gpu_milli=300),
            "mig": PodRequest(mig="3g.40gb"),
        }[shape]
        workload = Workload(
            f"w{self.next_pod}",
            (PodSet("p", count, request, min(minimum, count)),),
            topology=TopologyRequest(required=level),
        )
        self.next_pod += 1
        before = _snapshot(self.state)
        statement = Statement(self.state)
        if evict and self.state.allocations:
            statement.release(sorted(self.state.allocations)[0])  # a preemption what-if
        result = place_workload(self.state, workload, policy=self.policy, rng=self.rng, statement=statement)
        if result.placed:
            assert len(result.placements) >= min(minimum, count)
        if commit:
            statement.commit()
        else:
            statement.discard()
            assert _snapshot(self.state) == before, "a discarded statement left a trace"

    @invariant()
    def invariants_hold(self) -> None:
        self.state.check_invariants()

    @invariant()
    def nothing_held_twice(self) -> None:
        state = self.state
        whole: set[tuple[int, int]] = set()
        shared: dict[tuple[int, int], int] = {}
        instances: set[tuple[int, int, str, int]] = set()
        for alloc in state.allocations.values():
            assert state.alive[alloc.node]
            for gpu in alloc.gpus:
                key = (alloc.node, gpu)
                if alloc.milli == GPU_MILLI:
                    assert key not in whole and key not in shared, f"GPU {key} allocated twice"
                    whole.add(key)
                else:
                    assert key not in whole, f"GPU {key} both whole and shared"
                    shared[key] = shared.get(key, 0) + alloc.milli
                    assert shared[key] <= GPU_MILLI, f"GPU {key} shared beyond 1000 milli"
            if alloc.mig is not None:
                slot = (alloc.node, alloc.mig.gpu, alloc.mig.profile, alloc.mig.start)
                assert slot not in instances, f"MIG instance {slot} allocated twice"
                instances.add(slot)
        for row in state.rows():
            used = sum(a.cpu_milli for a in state.allocations.values() if a.node == row)
            assert used <= state.cpu_cap[row]


FleetMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFleetMachine = FleetMachine.TestCase
