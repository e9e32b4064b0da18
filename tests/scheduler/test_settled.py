"""A cycle that says it is settled tells the truth: a cycle on the same cache at any later time
attempts nothing and decides the same (`scheduler.settled`).

Random worlds are built so that, in some of them, time could matter: users sharing a queue (whose
fair-share history decays, so which user's workload heads the queue moves), minimum runtimes,
least-attained-service and strict-FIFO queues, queues preempting each other. After every cycle that
reports itself settled, a copy of the world is cycled again a little and a long while later, counting
attempts. In a queue shared by users, either every user's first parked workload has a memo that holds,
or the head is shown to come first at every later time (their shares move linearly in the history's
decay factor): dropping the comparison in the limit makes the week-later copy attempt.
"""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest

from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler import cycle as cycle_module
from gpufleet.scheduler.cache import ClusterCache
from gpufleet.scheduler.cycle import CycleResult, Scheduler, apply_decisions
from gpufleet.scheduler.outcome import Outcome
from gpufleet.scheduler.queueing import PreemptionPolicy, QueueingStrategy, QueueSettings, UsageHistory
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.workload import PodSet, Workload

H100 = "H100-80GB"
SEEDS = range(40)
LATER = (30.0, 900.0, 7 * 86400.0)
"""How much later the copies are cycled: the next periodic pass, a little over the history's half-life,
and a week (the shares at their limit)."""

Decided = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str, str], ...]]


def _decided(result: CycleResult) -> Decided:
    pending = tuple(sorted((name, p.reason.type, p.reason.message) for name, p in result.pending.items()))
    return tuple(a.workload for a in result.admitted), tuple(p.victim for p in result.preempted), pending


class _World:
    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.now = 1000.0
        self.made = 0
        fleet = FleetState(("rack",))
        nodes = rng.randint(2, 5)
        host = NodeSpec("", H100, 8, 512_000, 512_000, sharing=SharingMode.EXCLUSIVE)
        for i in range(nodes):
            fleet.add_node(dataclasses.replace(host, name=f"n{i}", labels={"rack": f"r{i % 2}"}))
        self.queues = [f"q{i}" for i in range(rng.randint(2, 4))]
        share = max(1, nodes * 8 // len(self.queues))
        tree = QuotaTree(
            [QuotaNode("root")]
            + [QuotaNode(q, "root", {H100: FlavorLimits(share * 1000)}) for q in self.queues]
        )
        # Half the worlds have none of the rules that make time matter, so that cycles settle often.
        timed = rng.random() < 0.5
        strategies = (QueueingStrategy.BEST_EFFORT_FIFO,) * 4 + (
            (QueueingStrategy.STRICT_FIFO, QueueingStrategy.LEAST_ATTAINED_SERVICE) if timed else ()
        )
        runtimes = (0.0, 0.0, 0.0, 300.0) if timed else (0.0,)
        self.users = ("alice", "bob", "carol") if rng.random() < 0.5 else ("",)
        settings = {
            name: QueueSettings(
                name,
                preemption=PreemptionPolicy(
                    within_queue=rng.choice(("LowerPriority", "Never")),
                    reclaim_within_cohort=rng.choice(("Any", "Never")),
                ),
                min_runtime_seconds=rng.choice(runtimes),
                strategy=rng.choice(strategies) if name != "root" else QueueingStrategy.BEST_EFFORT_FIFO,
            )
            for name in tree.nodes
        }
        self.cache = ClusterCache(fleet=fleet, tree=tree, settings=settings, history=UsageHistory(600.0))
        self.scheduler = Scheduler()
        for _ in range(rng.randint(nodes * 2, nodes * 6)):
            self.submit()

    def submit(self) -> None:
        rng = self.rng
        request = PodRequest(cpu_milli=1000, memory_mib=1024, gpus=rng.choice((1, 2, 4, 8)))
        self.cache.submit(
            Workload(
                f"w{self.made:03d}",
                (PodSet("main", rng.choice((1, 1, 2)), request),),
                queue=rng.choice(self.queues),
                priority=rng.choice((0, 0, 1, 5)),
                user=rng.choice(self.users),
                submitted_at=self.now,
            )
        )
        self.made += 1

    def cycle(self) -> CycleResult:
        result = self.scheduler.cycle(self.cache, now=self.now)
        apply_decisions(self.cache, result, now=self.now)
        return result

    def between(self) -> None:
        rng = self.rng
        self.now += rng.choice((0.0, 30.0, 600.0))
        if rng.random() < 0.4:
            return  # only time moved
        for name in sorted(self.cache.admitted):
            if rng.random() < 0.15:
                self.cache.finish(name, now=self.now)
        for _ in range(rng.randint(0, 3)):
            self.submit()


def _cycle_later(world: _World, later: float, monkeypatch: pytest.MonkeyPatch) -> tuple[Decided, int]:
    """Cycles a copy of the world `later` seconds on, unchanged; returns its decisions and attempts."""
    cache, scheduler = copy.deepcopy((world.cache, world.scheduler))
    attempts = 0
    attempt = cycle_module._Cycle._attempt

    def counted(self: cycle_module._Cycle, workload: Workload) -> Outcome:
        nonlocal attempts
        attempts += 1
        return attempt(self, workload)

    with monkeypatch.context() as patch:
        patch.setattr(cycle_module._Cycle, "_attempt", counted)
        result = scheduler.cycle(cache, now=world.now + later)
    return _decided(result), attempts


def _settled_cycles(seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Runs the world of `seed`, checking every settled cycle; returns (settled, unsettled) cycles that
    decided nothing."""
    world = _World(seed)
    settled = unsettled = 0
    for step in range(12):
        result = world.cycle()
        if result.settled:
            settled += 1
            assert not result.changed and not result.nominated
            for later in LATER:
                decided, attempts = _cycle_later(world, later, monkeypatch)
                assert attempts == 0, f"seed {seed} cycle {step}: {attempts} attempts {later} s later"
                assert decided == _decided(result), f"seed {seed} cycle {step}, {later} s later"
        elif not result.changed and world.cache.pending:
            unsettled += 1
        world.between()
    return settled, unsettled


@pytest.mark.parametrize("seed", SEEDS)
def test_a_settled_cycle_is_what_any_later_cycle_decides(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _settled_cycles(seed, monkeypatch)


def test_worlds_are_settled_often_and_not_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above is not vacuous: many cycles are settled, and many that decided nothing are not
    (a queue that never parks, a minimum runtime, a parked head never searched)."""
    counts = [_settled_cycles(seed, monkeypatch) for seed in SEEDS]
    assert sum(1 for settled, _ in counts if settled) >= len(SEEDS) // 3
    assert sum(1 for _, unsettled in counts if unsettled) >= len(SEEDS) // 3
