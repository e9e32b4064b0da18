"""Which hosts of a model a pod's node selector or required node affinity lets it use, in a few groups.

A pod whose `nodeSelector` or required node affinity no host of a model satisfies waits in that cluster
for ever, so the dispatcher must know the hosts' labels, yet a report must not grow with the cluster's
nodes. Per GPU model a worker reports its hosts grouped by their labels: each distinct combination with
its number of hosts and a histogram of those hosts by free whole GPUs (`{8: 12, 3: 2}`). Labels that
differ from host to host would make one group per host, so they are left out and named in `unlisted`:

- the worker's topology levels (rack, block...): the topology histograms already count those domains;
- then, while there are more than `MAX_GROUPS` groups, the key with the most distinct values
  (`kubernetes.io/hostname` first of all), so a report holds at most `MAX_GROUPS` groups.

A selector's requirements on an unlisted key are not checked: the groups stay a necessary condition,
like the rest of the summary. Matching is the scheduling core's own: `fleet.request.selector_matches`
for a nodeSelector and `fleet.request.node_selector_matches` for a Kubernetes NodeSelector (required
node affinity), both the placement filter's rules, so the dispatcher never disagrees with a worker's
scheduler about a host's labels.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.api.dra_devices import NodeSelector, NodeSelectorTerm
from gpufleet.fleet.request import node_selector_matches, selector_matches
from gpufleet.fleet.state import FleetState

MAX_GROUPS = 32
"""At most this many label groups per model: past it, the most varied label keys are left out."""

Histogram = dict[int, int]


@dataclass(slots=True)
class LabelGroup:
    """Hosts of one model with the same (listed) labels, and how many of them have each free count.

    `cpu` and `memory` give, per free count of `free`, the most free CPU (milli) and memory (MiB) of one
    such host, so a host whose GPUs are free while its CPU or memory is taken is not counted as room for
    a pod that asks for them; None: not reported (an older worker), taken as enough.
    """

    labels: dict[str, str]
    hosts: int
    free: Histogram = field(default_factory=dict)
    cpu: dict[int, int] | None = None
    memory: dict[int, int] | None = None

    def copy(self) -> LabelGroup:
        return LabelGroup(
            dict(self.labels),
            self.hosts,
            dict(self.free),
            None if self.cpu is None else dict(self.cpu),
            None if self.memory is None else dict(self.memory),
        )

    def room(self, free: int, cpu: int, memory: int) -> bool:
        """Whether a host with `free` GPUs free may also have `cpu` and `memory` free."""
        return (self.cpu is None or self.cpu.get(free, 0) >= cpu) and (
            self.memory is None or self.memory.get(free, 0) >= memory
        )

    def move(self, free: int, gpus: int, cpu: int = 0, memory: int = 0) -> None:
        """One host with `free` GPUs free gives a pod `gpus` of them, `cpu` and `memory`. The host left
        with fewer keeps the most its old count had, less what the pod took (the guess that keeps every
        cluster the worker could place it in); the next report replaces it."""
        move_domain(self.free, free, gpus)
        rest = free - gpus
        for most, used in ((self.cpu, cpu), (self.memory, memory)):
            if most is None:
                continue
            had = most.get(free, 0)
            if free not in self.free:
                most.pop(free, None)
            if rest > 0:
                most[rest] = max(most.get(rest, 0), had - used)


@dataclass(frozen=True, slots=True)
class HostRule:
    """What one pod set asks of its host's labels: a nodeSelector and a required node affinity."""

    selector: tuple[tuple[str, str], ...] = ()
    affinity: NodeSelector | None = None

    def __bool__(self) -> bool:
        return bool(self.selector) or self.affinity is not None

    def describe(self) -> str:
        """`nodeSelector pool=a100-spot`, `node affinity pool In [a, b]`: for a NoCluster reason."""
        parts = []
        if self.selector:
            parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in self.selector))
        if self.affinity is not None:
            terms = [
                " and ".join(f"{r.key} {r.operator} [{', '.join(r.values)}]" for r in term.match_expressions)
                or "fields"
                for term in self.affinity.node_selector_terms
            ]
            parts.append("node affinity " + " or ".join(f"({t})" for t in terms))
        return " and ".join(parts)


@dataclass(slots=True)
class HostLabels:
    """A model's hosts grouped by label; `unlisted` are the label keys the groups leave out."""

    groups: list[LabelGroup]
    unlisted: frozenset[str] = frozenset()

    def copy(self) -> HostLabels:
        return HostLabels([g.copy() for g in self.groups], self.unlisted)

    def matching(self, rules: Sequence[HostRule]) -> list[LabelGroup]:
        """The groups whose hosts satisfy every one of `rules` (as far as the listed labels tell)."""
        checks = [self._check(rule) for rule in rules]
        return [g for g in self.groups if all(check(g.labels) for check in checks)]

    def _check(self, rule: HostRule) -> Callable[[Mapping[str, str]], bool]:
        """Whether a host with given labels may satisfy `rule`: requirements on unlisted keys are taken as
        holding, the rest are matched by the scheduling core's own rules."""
        listed = [(k, v) for k, v in rule.selector if k not in self.unlisted]
        affinity = self._listed(rule.affinity)

        def check(labels: Mapping[str, str]) -> bool:
            if not selector_matches(listed, labels):
                return False
            return affinity is None or node_selector_matches(affinity, "", labels)

        return check

    def _listed(self, affinity: NodeSelector | None) -> NodeSelector | None:
        """The affinity without what the groups cannot tell (unlisted keys, node names); None when a term
        is left with nothing to check, since that term may then hold."""
        if affinity is None:
            return None
        terms = []
        for term in affinity.node_selector_terms:
            if not (term.match_expressions or term.match_fields):
                continue  # an empty term matches no node (Kubernetes): keep the rule's answer
            kept = [r for r in term.match_expressions if r.key not in self.unlisted]
            if not kept:
                return None
            terms.append(NodeSelectorTerm(match_expressions=kept))
        return NodeSelector(node_selector_terms=terms)

    def take_host(
        self,
        pod: int,
        rules: Sequence[HostRule],
        cpu: int = 0,
        memory: int = 0,
        *,
        among: Sequence[LabelGroup] = (),
    ) -> int | None:
        """Takes `pod` GPUs, `cpu` and `memory` from the tightest host of a matching group with room for
        them all (`among` those groups when the caller matched them already); the host's free GPUs
        before, or None when no host has room."""
        best: tuple[int, LabelGroup] | None = None
        for group in among or self.matching(rules):
            fitting = [free for free in group.free if free >= pod and group.room(free, cpu, memory)]
            if fitting and (best is None or min(fitting) < best[0]):
                best = (min(fitting), group)
        if best is None:
            return None
        free, group = best
        group.move(free, pod, cpu, memory)
        return free

    def most_free(self, rules: Sequence[HostRule], cpu: int = 0, memory: int = 0) -> int:
        """The most free GPUs of one matching host that also has `cpu` and `memory` free."""
        return max(
            (free for g in self.matching(rules) for free in g.free if g.room(free, cpu, memory)), default=0
        )

    def spread(self, amount: int) -> None:
        """Takes `amount` whole GPUs off the fullest hosts of any group (the pessimistic guess)."""
        while amount > 0:
            candidates = [(max(g.free), g) for g in self.groups if g.free]
            if not candidates:
                return
            free, group = max(candidates, key=lambda c: c[0])
            taken = min(free, amount)
            group.move(free, taken)
            amount -= taken


def move_domain(histogram: Histogram, key: int, amount: int) -> None:
    """One domain with `key` free GPUs now has `key - amount`."""
    left = histogram[key] - 1
    if left:
        histogram[key] = left
    else:
        del histogram[key]
    rest = key - amount
    if rest > 0:
        histogram[rest] = histogram.get(rest, 0) + 1


def host_labels(fleet: FleetState, rows: np.ndarray) -> HostLabels:
    """`rows`' hosts grouped by their labels, at most `MAX_GROUPS` groups (see the module)."""
    labels = [fleet.specs[int(row)].labels for row in rows]
    unlisted = set(fleet.levels)
    values: dict[str, set[str]] = {}
    for host in labels:
        for key, value in host.items():
            values.setdefault(key, set()).add(value)
    unlisted &= set(values)
    # A key with more values than MAX_GROUPS makes too many groups by itself, and is dropped before any
    # key with fewer values would be: drop such keys at once instead of pass by pass.
    unlisted |= {key for key, seen in values.items() if len(seen) > MAX_GROUPS}
    while True:
        keys = sorted(set(values) - unlisted)
        combos: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for index, host in enumerate(labels):
            combo = tuple((k, host[k]) for k in keys if k in host)
            combos.setdefault(combo, []).append(index)
        if len(combos) <= MAX_GROUPS or not keys:
            break
        # The most varied key first (a host's name): it splits the groups most and selectors rarely
        # name it; the name breaks ties so that a report is deterministic.
        unlisted.add(max(keys, key=lambda k: (len(values[k]), k)))
    free = fleet.whole_free[rows]
    cpu, memory = fleet.cpu_free[rows], fleet.mem_free[rows]
    groups = []
    for combo, members in sorted(combos.items()):
        counts = np.bincount(free[members])
        histogram = {int(n): int(c) for n, c in enumerate(counts) if n and c}
        group = LabelGroup(dict(combo), len(members), histogram, {}, {})
        for index in members:
            n = int(free[index])
            if n:  # the most free CPU and memory of one host per free count (see LabelGroup)
                assert group.cpu is not None and group.memory is not None
                group.cpu[n] = max(group.cpu.get(n, 0), int(cpu[index]))
                group.memory[n] = max(group.memory.get(n, 0), int(memory[index]))
        groups.append(group)
    return HostLabels(groups, frozenset(unlisted))
