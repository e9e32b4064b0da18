"""Queue settings, decayed usage history and fair share: the order in which pending work is tried.

Order (ARCHITECTURE.md, Scheduling cycle step 1): priority first; then the queue tree's fair share,
compared level by level from the root as in a tournament (an organisation that borrows less goes
first, then inside it the team that borrows less, ...); then submission time; then name.

A queue's share is Kueue's dominant-resource share of what it borrows (above its nominal quota),
relative to what its parent can lend it (`QuotaTree.potential`), plus the dominant share of its
decayed historical usage (KAI's time-decayed usage): the "credit" that light users build up. Both are
divided by `fairShareWeight`.
Inside a leaf queue, users are ordered the same way by the GPUs they hold now plus their decayed
history, so one heavy user cannot starve the others of a shared queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from gpufleet.scheduler.attained import LasSettings
from gpufleet.scheduler.config import FairSharingConfig
from gpufleet.scheduler.quota import QuotaTree, QuotaUsage
from gpufleet.scheduler.workload import Workload


class QueueingStrategy(Enum):
    """StrictFIFO: only the head of a queue is tried. BestEffortFIFO: when the head cannot start, the
    next workloads of the queue are tried, so a smaller later one may start (Kueue's default).
    LeastAttainedService: as BestEffortFIFO, but ordered by level of attained GPU-seconds first
    (Tiresias' discretised 2D-LAS, `attained.py`), and a lower level may preempt a higher one of the same
    priority under `withinQueue: LowerPriority`."""

    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    LEAST_ATTAINED_SERVICE = "LeastAttainedService"


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """Whom a queue's workloads may evict; the defaults are ARCHITECTURE.md's."""

    within_queue: str = "LowerPriority"
    reclaim_within_cohort: str = "Any"
    borrow_within_cohort: str = "Never"
    max_priority_threshold: int | None = None
    """borrowWithinCohort only: other queues' workloads above this priority are never victims."""


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What the scheduler needs of a queue besides its quota. `user_gpu_limit` is milli-GPU per user."""

    name: str
    fair_share_weight: float = 1.0
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    min_runtime_seconds: float = 0.0
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    user_gpu_limit: int | None = None
    las: LasSettings = field(default_factory=LasSettings)
    """Levels and starvation rule; read only with the LeastAttainedService strategy."""

    @property
    def least_attained(self) -> bool:
        return self.strategy is QueueingStrategy.LEAST_ATTAINED_SERVICE


class UsageHistory:
    """Exponentially decayed average usage per key (a queue, or a queue and user) and flavor.

    Usage is a step function that the world reports when it changes (`record`); the average at any
    later time is computed, not stored, so reading it is pure. `seed` sets an average directly, which
    is how a scenario states "this queue used 32 GPUs lately".
    """

    def __init__(self, half_life_seconds: float) -> None:
        self.half_life = half_life_seconds
        # key -> flavor -> (average at `since`, usage level since `since`, since)
        self._state: dict[str, dict[str, tuple[float, float, float]]] = {}

    def _decay(self, elapsed: float) -> float:
        if self.half_life <= 0:
            return 0.0
        return math.pow(0.5, max(0.0, elapsed) / self.half_life)

    def average(self, key: str, flavor: str, now: float) -> float:
        entry = self._state.get(key, {}).get(flavor)
        if entry is None or self.half_life <= 0:
            return 0.0
        avg, level, since = entry
        return level + (avg - level) * self._decay(now - since)

    def course(self, key: str, flavor: str) -> tuple[float, float, float] | None:
        """What the average is computed from: (average at `since`, level since then, since); None
        without history. Two keys with the same course have the same average at every time."""
        return self._state.get(key, {}).get(flavor)

    def record(self, key: str, flavor: str, level: float, now: float) -> None:
        """Usage of `key` is `level` from `now` on."""
        avg = self.average(key, flavor, now)
        self._state.setdefault(key, {})[flavor] = (avg, level, now)

    def seed(self, key: str, flavor: str, average: float, level: float, now: float) -> None:
        self._state.setdefault(key, {})[flavor] = (average, level, now)

    def flavors(self, key: str) -> Iterable[str]:
        return self._state.get(key, {}).keys()

    def total(self, key: str, now: float) -> float:
        return sum(self.average(key, flavor, now) for flavor in self.flavors(key))


def user_key(queue: str, user: str) -> str:
    return f"{queue}\x00{user}"


class FairShare:
    """Every queue's fair share (lower goes first; roots 0), computed when first asked for in a cycle.

    A leaf's history is what the world recorded for it; an inner queue's is the sum of its leaves'.
    History does not change inside a cycle, so each queue's is summed at most once; current borrowing
    does, and `refresh` forgets the shares on one path after an admission or an eviction there. Shares
    are computed on demand: a cycle that looks at a few queues of a large tree (one arrival into a full
    fleet) must not pay for every queue of it.
    """

    def __init__(
        self,
        *,
        tree: QuotaTree,
        usage: QuotaUsage,
        history: UsageHistory,
        settings: Mapping[str, QueueSettings],
        fair: FairSharingConfig,
        now: float,
    ) -> None:
        self.tree = tree
        self.usage = usage
        self.history = history
        self.settings = settings
        self.fair = fair
        self.now = now
        self._hist: dict[str, dict[str, float]] = {}
        self._shares: dict[str, float] = {}

    @property
    def shares(self) -> dict[str, float]:
        """Every queue's share (computes those not asked for yet)."""
        return {name: self.share(name) for name in self.tree.nodes}

    def _history_of(self, name: str) -> dict[str, float]:
        found = self._hist.get(name)
        if found is not None:
            return found
        tree = self.tree
        if tree.is_leaf(name):
            history = self.history
            found = {f: history.average(name, f, self.now) for f in history.flavors(name)}
        else:
            found = {}
            for child in tree.children[name]:
                for flavor, value in self._history_of(child).items():
                    found[flavor] = found.get(flavor, 0.0) + value
        self._hist[name] = found
        return found

    def share(self, name: str) -> float:
        found = self._shares.get(name)
        if found is None:
            found = self._shares[name] = self._share(name)
        return found

    def _share(self, name: str) -> float:
        node = self.tree.nodes[name]
        if node.parent is None:
            return 0.0
        # What the parent can lend it (decision 28), not the parent's own quota: a parent without one
        # still passes on what the tree above lends.
        pool = self.tree.potential[node.parent]
        borrowed = 0.0
        used_lately = 0.0
        hist = self._history_of(name) if self.fair.history_weight else {}
        for flavor, held in pool.items():
            if held <= 0:
                continue
            borrowed = max(borrowed, self.usage.borrowed(name, flavor) / held)
            used_lately = max(used_lately, hist.get(flavor, 0.0) / held)
        weight = self.settings[name].fair_share_weight if name in self.settings else 1.0
        value = borrowed + self.fair.history_weight * used_lately
        if weight > 0:
            return value / weight
        return math.inf if value > 0 else 0.0

    def refresh(self, queue: str) -> None:
        """Usage changed on `queue`'s path: its shares are computed again when next asked for."""
        for name in self.tree.paths[queue]:
            self._shares.pop(name, None)

    def path(self, queue: str) -> tuple[float, ...]:
        """The shares from just below the root down to `queue`: the tournament key of a queue."""
        path = self.tree.paths[queue]
        return tuple(self.share(name) for name in reversed(path[:-1]))


def queue_shares(
    *,
    tree: QuotaTree,
    usage: QuotaUsage,
    history: UsageHistory,
    settings: Mapping[str, QueueSettings],
    fair: FairSharingConfig,
    now: float,
) -> dict[str, float]:
    """Every queue's fair share now (lower goes first); roots have share 0."""
    return FairShare(tree=tree, usage=usage, history=history, settings=settings, fair=fair, now=now).shares


def path_shares(tree: QuotaTree, shares: Mapping[str, float], queue: str) -> tuple[float, ...]:
    """The shares from just below the root down to `queue`: the tournament key of a queue."""
    path = tree.paths[queue]
    return tuple(shares[name] for name in reversed(path[:-1]))


def queue_order(
    share: dict[str, float], level: Callable[[Workload], int] | None = None
) -> Callable[[Workload], tuple[object, ...]]:
    """Order inside a leaf queue: priority, the level of attained service (least-attained-service
    queues), the user's fair share (when users differ), submission, name."""
    if level is not None:
        if not share:
            return lambda w: (-w.priority, level(w), w.submitted_at, w.name)
        return lambda w: (-w.priority, level(w), share[w.user], w.submitted_at, w.name)
    if not share:
        return lambda w: (-w.priority, w.submitted_at, w.name)
    return lambda w: (-w.priority, share[w.user], w.submitted_at, w.name)
