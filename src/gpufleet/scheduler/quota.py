"""The quota tree: nominal quota, borrowing and lending along a hierarchy of queues of any depth.

Amounts are milli-GPU per flavor (a GPU model, or a MIG profile name where one instance counts 1000).
The arithmetic is Kueue's hierarchical cohorts, so users moving from Kueue get the same answers:

- `subtree[n]` is a node's own nominal plus what its children may lend it (their lendable part);
- `guaranteed[n]` is what a node keeps for itself: `subtree - lendingLimit` when a lending limit is set,
  otherwise nothing (everything it does not use is lent);
- a node's usage is charged to its parent only above its guaranteed part;
- `available[n]` is its unused guaranteed part plus what its parent still has, capped by its borrowing
  limit.

The tree (limits) is immutable; `QuotaUsage` is the mutable part, and every change to it is its own
inverse (`add` then `add` of the negation), which is what the cycle's undo log relies on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.errors import ValidationError

UNLIMITED = 1 << 62
"""Stand-in for an unbounded amount (the implicit `default` queue)."""


@dataclass(frozen=True, slots=True)
class FlavorLimits:
    """One flavor's quota of one queue, in milli-GPU; None limits mean unbounded."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class QuotaNode:
    """A queue as the quota tree sees it. `unlimited` marks a queue that may use anything (no quota set)."""

    name: str
    parent: str | None = None
    quotas: Mapping[str, FlavorLimits] = field(default_factory=dict)
    unlimited: bool = False


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    """Why a request does not fit: the leaf's numbers and the queue where the limit binds (milli-GPU)."""

    queue: str
    flavor: str
    requested: int
    used: int
    nominal: int
    limit: int | None
    available: int
    limited_by: str

    def details(self) -> dict[str, object]:
        """The numbers in GPUs, for a pending reason."""
        return {
            "queue": self.queue,
            "flavor": self.flavor,
            "requested": _gpus(self.requested),
            "used": _gpus(self.used),
            "nominal": _gpus(self.nominal),
            "limit": None if self.limit is None else _gpus(self.limit),
            "available": _gpus(self.available),
            "limitedBy": self.limited_by,
        }

    def message(self) -> str:
        limit = "unbounded" if self.limit is None else f"{_gpus(self.limit):g}"
        text = (
            f"queue {self.queue} flavor {self.flavor}: requested {_gpus(self.requested):g}, "
            f"used {_gpus(self.used):g}, nominal {_gpus(self.nominal):g}, limit {limit}, "
            f"available {_gpus(self.available):g}"
        )
        if self.limited_by != self.queue:
            text += f" (limited by queue {self.limited_by})"
        return text


def _nominal(node: QuotaNode, flavor: str) -> int:
    limits = node.quotas.get(flavor)
    return 0 if limits is None else limits.nominal


def _gpus(milli: int) -> float:
    return milli / 1000


class QuotaTree:
    """The immutable limits of a forest of queues, with each node's subtree and guaranteed quota."""

    def __init__(self, nodes: Iterable[QuotaNode]) -> None:
        self.nodes: dict[str, QuotaNode] = {}
        for node in nodes:
            if node.name in self.nodes:
                raise ValidationError(f"queue {node.name!r} is declared twice", obj=f"Queue {node.name}")
            self.nodes[node.name] = node
        self.children: dict[str, list[str]] = {name: [] for name in self.nodes}
        for node in self.nodes.values():
            if node.parent is not None:
                if node.parent not in self.nodes:
                    raise ValidationError(
                        f"unknown queue {node.parent!r}", obj=f"Queue {node.name}", field="parent"
                    )
                self.children[node.parent].append(node.name)
        self.paths: dict[str, tuple[str, ...]] = {name: self._path(name) for name in self.nodes}
        self.flavors: tuple[str, ...] = tuple(
            dict.fromkeys(flavor for node in self.nodes.values() for flavor in node.quotas)
        )
        self.subtree: dict[str, dict[str, int]] = {}
        self.guaranteed: dict[str, dict[str, int]] = {}
        for root in self.roots():
            self._compute(root)
        # What each queue could hold were nothing else in use: its guaranteed part plus what its parent
        # could give it, capped by its borrowing limit (top down; a root's is its subtree).
        self.potential: dict[str, dict[str, int]] = {}
        for root in self.roots():
            self._compute_potential(root)

    def _path(self, name: str) -> tuple[str, ...]:
        """From the node up to its root; a cycle in `parent` links is a user error."""
        path = [name]
        seen = {name}
        parent = self.nodes[name].parent
        while parent is not None:
            if parent in seen:
                raise ValidationError(
                    f"parent links form a cycle through {parent!r}", obj=f"Queue {name}", field="parent"
                )
            seen.add(parent)
            path.append(parent)
            parent = self.nodes[parent].parent
        return tuple(path)

    def roots(self) -> list[str]:
        return [name for name, node in self.nodes.items() if node.parent is None]

    def is_leaf(self, name: str) -> bool:
        return not self.children[name]

    def root_of(self, name: str) -> str:
        return self.paths[name][-1]

    def _compute(self, name: str) -> None:
        for child in self.children[name]:
            self._compute(child)
        node = self.nodes[name]
        subtree: dict[str, int] = {}
        for flavor in self.flavors:
            limits = node.quotas.get(flavor)
            total = limits.nominal if limits else 0
            for child in self.children[name]:
                total += self.subtree[child][flavor] - self.guaranteed[child][flavor]
            subtree[flavor] = total
        self.subtree[name] = subtree
        self.guaranteed[name] = {
            flavor: self._guaranteed(node.quotas.get(flavor), subtree[flavor]) for flavor in self.flavors
        }

    def _compute_potential(self, name: str) -> None:
        node = self.nodes[name]
        subtree = self.subtree[name]
        if node.parent is None:
            self.potential[name] = dict(subtree)
        else:
            above = self.potential[node.parent]
            row = {}
            for flavor in self.flavors:
                kept = self.guaranteed[name][flavor]
                from_parent = above[flavor]
                limits = node.quotas.get(flavor)
                if limits is not None and limits.borrowing_limit is not None:
                    from_parent = min(from_parent, subtree[flavor] - kept + limits.borrowing_limit)
                row[flavor] = kept + max(0, from_parent)
            self.potential[name] = row
        for child in self.children[name]:
            self._compute_potential(child)

    @staticmethod
    def _guaranteed(limits: FlavorLimits | None, subtree: int) -> int:
        if limits is None or limits.lending_limit is None:
            return 0
        return max(0, subtree - limits.lending_limit)

    def has_flavor(self, queue: str, flavor: str) -> bool:
        """Whether the queue lists the flavor (a queue without it cannot admit what needs it)."""
        node = self.nodes[queue]
        return node.unlimited or flavor in node.quotas

    def nominal(self, queue: str, flavor: str) -> int:
        return self.subtree[queue].get(flavor, 0)

    def borrowing_limit(self, queue: str, flavor: str) -> int | None:
        limits = self.nodes[queue].quotas.get(flavor)
        return None if limits is None else limits.borrowing_limit


class QuotaUsage:
    """Usage per queue and flavor, charged up the tree as Kueue does; changes are their own inverse."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self.used: dict[str, dict[str, int]] = {name: {} for name in tree.nodes}
        # Changed by every change to a number never used before (memos of what borrows read it); a
        # change and its inverse take two. `rewind` goes back to an earlier number, whose memos hold
        # again; the next change still takes a new one, or a memo made in a what-if that was undone
        # would be read as the answer for another table with the same number.
        self.version = 0
        self._issued = 0
        # Answers at `_memo_version`, both asked again and again between two changes of usage: what
        # `_available` found per queue and flavor (a cycle asks the same queues and their parents),
        # and who guarantees what (a backlog's cycle asks about the same few amounts per queue at
        # each push and pop of its heap).
        self._memo: dict[tuple[str, str], tuple[int, str]] = {}
        self._guarantors: dict[tuple[str, tuple[tuple[str, int], ...]], str | None] = {}
        self._memo_version = -1

    def add(self, queue: str, amounts: Mapping[str, int], sign: int = 1) -> None:
        """Charges (sign 1) or refunds (sign -1) `amounts` to a leaf queue and, above guarantees, upwards."""
        tree = self.tree
        self._issued += 1
        self.version = self._issued
        for flavor, amount in amounts.items():
            delta = sign * amount
            for name in tree.paths[queue]:
                if not delta:
                    break
                row = self.used[name]
                old = row.get(flavor, 0)
                new = old + delta
                row[flavor] = new
                kept = tree.guaranteed[name].get(flavor, 0)
                delta = max(0, new - kept) - max(0, old - kept)

    def rewind(self, version: int) -> None:
        """After changes that were all undone: the table is as it was at `version`, so memos keyed by it
        hold again (the next change takes a number not used before, so memos made since, at other
        numbers, are never read as this table's)."""
        self.version = version

    def usage(self, queue: str, flavor: str) -> int:
        return self.used[queue].get(flavor, 0)

    def borrowed(self, queue: str, flavor: str) -> int:
        """How far the queue is above its nominal (subtree) quota."""
        return max(0, self.usage(queue, flavor) - self.tree.nominal(queue, flavor))

    def available(self, queue: str, flavor: str) -> int:
        """How much more of the flavor the queue may take now, borrowing included."""
        if self.tree.nodes[queue].unlimited:
            return UNLIMITED
        return self._available(queue, flavor)[0]

    def _memos_now(self) -> None:
        """Forgets the memos when they were made at another version of the table."""
        if self._memo_version != self.version:
            self._memo.clear()
            self._guarantors.clear()
            self._memo_version = self.version

    def _available(self, name: str, flavor: str) -> tuple[int, str]:
        """Available amount and the queue whose limit binds it."""
        self._memos_now()
        key = (name, flavor)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._compute_available(name, flavor)
        return found

    def _compute_available(self, name: str, flavor: str) -> tuple[int, str]:
        tree = self.tree
        node = tree.nodes[name]
        subtree = tree.subtree[name].get(flavor, 0)
        used = self.usage(name, flavor)
        if node.parent is None:
            return max(0, subtree - used), name
        kept = tree.guaranteed[name].get(flavor, 0)
        local = max(0, kept - used)
        from_parent, binding = self._available(node.parent, flavor)
        limits = node.quotas.get(flavor)
        if limits is not None and limits.borrowing_limit is not None:
            stored = subtree - kept
            used_in_parent = max(0, used - kept)
            cap = stored - used_in_parent + limits.borrowing_limit
            if cap <= from_parent:
                from_parent, binding = cap, name
        return local + max(0, from_parent), binding

    def guarantor(self, queue: str, amounts: Mapping[str, int]) -> str | None:
        """`_guarantor`, remembered until usage changes."""
        self._memos_now()
        key = (queue, tuple(amounts.items()))
        if key in self._guarantors:
            return self._guarantors[key]
        found = self._guarantors[key] = self._guarantor(queue, amounts)
        return found

    def _guarantor(self, queue: str, amounts: Mapping[str, int]) -> str | None:
        """The queue whose nominal quota holds `amounts` added to the leaf `queue`, or None when they
        would be borrowed from the root (decision 27).

        Per flavor, the lowest queue on the path that holds its usage with `amounts` added, charged up
        as `add` would, within its subtree quota: the leaf itself, or an inner queue below the root that
        sets a nominal quota of its own for the flavor (an organisation's quota is a guarantee to its
        subtree; an inner queue without one only passes on what its children lend each other). Over
        several flavors, the highest of those; the leaf when nothing is asked."""
        tree = self.tree
        path = tree.paths[queue]
        top = 0
        for flavor, amount in amounts.items():
            if not amount:
                continue
            delta = amount
            level = None
            for depth, name in enumerate(path):
                old = self.used[name].get(flavor, 0)
                new = old + delta
                if new <= tree.subtree[name].get(flavor, 0) and (
                    depth == 0 or (depth < len(path) - 1 and _nominal(tree.nodes[name], flavor) > 0)
                ):
                    level = depth
                    break
                kept = tree.guaranteed[name].get(flavor, 0)
                delta = max(0, new - kept) - max(0, old - kept)
            if level is None:
                return None
            top = max(top, level)
        return path[top]

    def fits(self, queue: str, amounts: Mapping[str, int]) -> QuotaShortfall | None:
        """None when the leaf queue can take `amounts` now; else the first flavor that does not fit."""
        tree = self.tree
        node = tree.nodes[queue]
        for flavor, amount in amounts.items():
            if not amount or node.unlimited:
                continue
            if flavor not in node.quotas:
                return QuotaShortfall(queue, flavor, amount, self.usage(queue, flavor), 0, 0, 0, queue)
            available, binding = self._available(queue, flavor)
            if amount > available:
                nominal = tree.nominal(queue, flavor)
                borrow = tree.borrowing_limit(queue, flavor)
                limit = None if borrow is None else nominal + borrow
                used = self.usage(queue, flavor)
                return QuotaShortfall(queue, flavor, amount, used, nominal, limit, available, binding)
        return None

    def limits(self, queue: str, amounts: Mapping[str, int]) -> dict[str, str]:
        """Per flavor of `amounts` that the leaf `queue` cannot take now, the queue whose limit binds it:
        its own borrowing limit, an ancestor's, or a root's quota (as `QuotaShortfall.limited_by`)."""
        node = self.tree.nodes[queue]
        if node.unlimited:
            return {}
        out = {}
        for flavor, amount in amounts.items():
            if amount and flavor in node.quotas:
                available, binding = self._available(queue, flavor)
                if amount > available:
                    out[flavor] = binding
        return out

    def reaches(self, queue: str, flavor: str, target: str) -> bool:
        """Whether refunding some of `flavor` from the leaf `queue` lowers `target`'s usage: `target` is
        on its path and every queue below it there uses more than it keeps (a refund within a kept part
        stops where that part is)."""
        for name in self.tree.paths[queue]:
            if name == target:
                return True
            if self.used[name].get(flavor, 0) <= self.tree.guaranteed[name].get(flavor, 0):
                return False
        return False

    def snapshot(self) -> dict[str, dict[str, int]]:
        """A copy of the usage table (tests compare it before and after a what-if)."""
        return {name: {f: v for f, v in row.items() if v} for name, row in self.used.items()}
