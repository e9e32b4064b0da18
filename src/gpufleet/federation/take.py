"""Whether a gang fits a cluster's summary now, and the summary once it is taken out.

The gang's whole-GPU pods, shares and MIG instances are taken from a copy of one model's summary:

- with a required level R (`rack`, `nvlink`, `host`...), the whole gang goes into the smallest domain of
  R with room for it (best fit, as the scheduler's topology step does), and into the smallest domain of
  every coarser level that holds it, since a rack lies inside one block;
- each pod needs a host with room for it (best fit per pod, biggest pods first), unless R is `host` or
  finer, which put the gang on one host already;
- on dynamic GPUs (whole or shared, whichever pod comes) whole GPUs taken leave fewer shares, and shares
  are assumed to land on free GPUs;
- levels the placement does not decide lose the GPUs from their fullest domains first: the summary does
  not know which rack a host is in, so it assumes the worst for the next big gang. The next heartbeat
  replaces the guess with the worker's count.

Before any of that, `never_fits` keeps a gang off a cluster where one of its GPU pods fits no host of
the model however long it waits: more CPU or memory than the largest host has, or a taint every host
carries that the pod does not tolerate (the scheduling core's own rule, `fleet.request.untolerated`), or
a node selector or required node affinity no host of the model satisfies (`federation.hostlabels`). A
whole-GPU pod with such a rule takes its host from the label groups that match it.

Pure functions over small dictionaries: a histogram has one key per distinct free count (at most a
node's or a domain's GPUs), so a check costs microseconds however many nodes the cluster has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.federation.hostlabels import HostRule, LabelGroup, move_domain
from gpufleet.federation.summary import Histogram, ModelSummary
from gpufleet.fleet.node import SharingMode
from gpufleet.fleet.request import GPU_MILLI, Toleration, untolerated
from gpufleet.fleet.state import HOST_LEVEL, NVLINK_LEVEL

DYNAMIC = SharingMode.DYNAMIC.value


@dataclass(frozen=True, slots=True)
class GangShape:
    """What one workload takes: whole GPUs per pod, share milli-GPU per pod and MIG instances."""

    whole: tuple[int, ...] = ()
    share: tuple[int, ...] = ()
    mig: tuple[str, ...] = ()
    required: str | None = None
    cpu_milli: int = 0
    """The most CPU one GPU pod asks (CPU-only pods may run on hosts the summary does not count)."""
    memory_mib: int = 0
    """The most memory one GPU pod asks."""
    tolerations: tuple[tuple[Toleration, ...], ...] = ()
    """Each GPU pod set's tolerations: every one must tolerate the taints all hosts of the model carry."""
    rules: tuple[HostRule, ...] = ()
    """Each GPU pod set's node selector and required node affinity, where it has one: some host must match."""
    whole_rules: tuple[HostRule, ...] = ()
    """Beside `whole`, pod by pod, the rule its host must match (empty: any host); () when no pod has one."""
    whole_needs: tuple[tuple[int, int], ...] = ()
    """Beside `whole`, pod by pod, the CPU (milli) and memory (MiB) it asks on its host; () for none."""

    @property
    def whole_gpus(self) -> int:
        return sum(self.whole)


def best_fit(histogram: Histogram, amount: int) -> bool:
    """Takes `amount` from the smallest domain that holds it; False (and nothing taken) when none does."""
    if amount <= 0:
        return True
    fitting = [key for key in histogram if key >= amount]
    if not fitting:
        return False
    move_domain(histogram, min(fitting), amount)
    return True


def spread(histogram: Histogram, amount: int) -> None:
    """Takes `amount` from the fullest domains first (the pessimistic guess for an undecided level)."""
    while amount > 0 and histogram:
        key = max(histogram)
        taken = min(key, amount)
        move_domain(histogram, key, taken)
        amount -= taken


def tightest_host(summary: ModelSummary, gang: GangShape) -> int:
    """Free whole GPUs on the host the gang's biggest pod would take (the smallest with room for it).

    The dispatcher ranks equally priced clusters by it, so a small pod goes to the cluster whose free
    GPUs are already broken up the most tightly around it, as one cluster's best fit over all its
    hosts would place it, instead of breaking a whole host in the fullest cluster while another has a
    partial host it fits. A gang required on one host or NVLink domain is one pod. 0 for a gang with no
    whole-GPU pod (the host does not matter to it); past any host when none has room (it does not fit).
    """
    if not gang.whole:
        return 0
    pod = gang.whole_gpus if gang.required in (HOST_LEVEL, NVLINK_LEVEL) else max(gang.whole)
    fitting = [free for free in summary.free_domains.get(HOST_LEVEL, {}) if free >= pod]
    return min(fitting, default=summary.gpus + 1)


def never_fits(summary: ModelSummary, gang: GangShape, model: str | None = None) -> str | None:
    """Why a GPU pod of the gang fits no host of the model ever, or None. A figure the worker did not
    report (an older release) is taken as enough; `model` names the model in the reason."""
    if summary.host_cpu_milli is not None and gang.cpu_milli > summary.host_cpu_milli:
        return f"a pod asks {gang.cpu_milli} milli-CPU, the largest host has {summary.host_cpu_milli}"
    if summary.host_memory_mib is not None and gang.memory_mib > summary.host_memory_mib:
        return f"a pod asks {gang.memory_mib} MiB of memory, the largest host has {summary.host_memory_mib}"
    for tolerations in gang.tolerations:
        taint = untolerated(summary.taints, tolerations)
        if taint is not None:
            return f"a pod does not tolerate {taint.key}={taint.value}:{taint.effect}, which every host has"
    labels = summary.host_labels
    for rule in gang.rules if labels is not None else ():
        assert labels is not None
        if not labels.matching((rule,)):
            return f"no host{f' of {model}' if model else ''} matches {rule.describe()}"
    return None


def take(
    summary: ModelSummary, gang: GangShape, levels: Sequence[str], model: str | None = None
) -> ModelSummary | str:
    """The summary with the gang taken out, or why it does not fit (a short phrase naming what lacks).

    `levels` are the cluster's labelled levels from coarse to fine (zone, block, rack); `nvlink` and
    `host` come below them. `model` (the summary's) is named in a reason about host labels.
    """
    never = never_fits(summary, gang, model)
    if never is not None:
        return never
    total = gang.whole_gpus
    if total > summary.free_gpus:
        return f"{total} free GPUs needed, {summary.free_gpus} free"
    share = sum(gang.share)
    if share > summary.free_share_milli:
        return f"{share} milli-GPU of shares needed, {summary.free_share_milli} free"
    wanted: dict[str, int] = {}
    for profile in gang.mig:
        wanted[profile] = wanted.get(profile, 0) + 1
    for profile, count in wanted.items():
        if count > summary.free_mig.get(profile, 0):
            return f"{count} free {profile} instances needed, {summary.free_mig.get(profile, 0)} free"
    order = [*levels, HOST_LEVEL, NVLINK_LEVEL]
    required = gang.required
    if required is not None and required not in order:
        return f"the cluster has no topology level {required!r}"
    after = summary.copy()
    after.free_gpus -= total
    after.free_share_milli -= share
    if DYNAMIC in summary.by_mode:
        # Dynamic GPUs are whole or shared, whichever pod comes: whole GPUs taken leave fewer shares, and
        # shares may land on free GPUs (assume they do, GPU by GPU, the pessimistic guess).
        after.free_share_milli = max(0, after.free_share_milli - total * GPU_MILLI)
        whole_lost = min(after.free_gpus, -(-share // GPU_MILLI))
        if whole_lost:
            after.free_gpus -= whole_lost
            for histogram in after.free_domains.values():
                spread(histogram, whole_lost)
            if after.host_labels is not None:
                after.host_labels.spread(whole_lost)
    for profile, count in wanted.items():
        after.free_mig[profile] -= count
    if total:
        failed = _take_whole(after, gang, order)
        if failed is not None:
            return failed
    return after


def _take_whole(after: ModelSummary, gang: GangShape, order: list[str]) -> str | None:
    total = gang.whole_gpus
    required = gang.required
    depth = order.index(required) if required is not None else None
    decided: set[str] = set()
    if depth is not None:
        # The gang in one domain of the required level, hence of every coarser one.
        # One host holds the whole gang when the level is host or finer: its pods' CPU and memory add up.
        cpu, memory = sum(c for c, _ in gang.whole_needs), sum(m for _, m in gang.whole_needs)
        for level in order[: depth + 1]:
            histogram = after.free_domains.setdefault(level, {})
            on_host = level == HOST_LEVEL
            if not (
                _take_host(after, total, gang.rules, cpu, memory) if on_host else best_fit(histogram, total)
            ):
                if level == required:
                    if on_host:
                        largest = _most_free(after, gang.rules, cpu, memory)
                        where = f"{level}{_matching(gang.rules)}{_with(cpu, memory)}"
                    else:
                        largest, where = max(histogram, default=0), level
                    return f"{total} GPUs needed in one {where}, at most {largest} free in one"
                spread(histogram, total)
                if on_host and after.host_labels is not None:
                    after.host_labels.spread(total)
            decided.add(level)
    if HOST_LEVEL not in decided:
        rules = gang.whole_rules or (HostRule(),) * len(gang.whole)
        needs = gang.whole_needs or ((0, 0),) * len(gang.whole)
        matched: dict[int, list[LabelGroup]] = {}  # a gang's pods share their pod set's rule: match it once
        for pod, rule, (cpu, memory) in sorted(
            zip(gang.whole, rules, needs, strict=True), key=lambda p: -p[0]
        ):
            mine = (rule,) if rule else ()
            if after.host_labels is not None and id(rule) not in matched:
                matched[id(rule)] = after.host_labels.matching(mine)
            if not _take_host(after, pod, mine, cpu, memory, matched.get(id(rule), ())):
                most = _most_free(after, mine, cpu, memory)
                free = f"{pod} free{_with(cpu, memory)}"
                return f"a pod of {pod} GPUs needs a host{_matching(mine)} with {free}, at most {most}"
        decided.add(HOST_LEVEL)
    for level in order:
        if level not in decided:
            spread(after.free_domains.setdefault(level, {}), total)
    return None


def _take_host(
    after: ModelSummary,
    pod: int,
    rules: Sequence[HostRule],
    cpu: int = 0,
    memory: int = 0,
    among: Sequence[LabelGroup] = (),
) -> bool:
    """Takes `pod` GPUs (and `cpu`, `memory`) from the tightest host that has room for them and matches
    `rules` (its groups `among`, when matched already): from the label groups when the worker reported
    them (the host histogram follows), else from the host histogram (GPUs only)."""
    hosts = after.free_domains.setdefault(HOST_LEVEL, {})
    if after.host_labels is None:
        return best_fit(hosts, pod)
    free = after.host_labels.take_host(pod, rules, cpu, memory, among=among)
    if free is None:
        return False
    if free in hosts:
        move_domain(hosts, free, pod)
    else:  # both were guessed down since the report and drifted apart: keep each its own guess
        best_fit(hosts, pod)
    return True


def _most_free(after: ModelSummary, rules: Sequence[HostRule], cpu: int, memory: int) -> int:
    if after.host_labels is None:
        return max(after.free_domains.get(HOST_LEVEL, {}), default=0)
    return after.host_labels.most_free(rules, cpu, memory)


def _with(cpu: int, memory: int) -> str:
    """` (and 64000 milli-CPU, 262144 MiB)`: what else the host needs free beside the GPUs."""
    return f" (and {cpu} milli-CPU, {memory} MiB)" if cpu or memory else ""


def _matching(rules: Sequence[HostRule]) -> str:
    return "".join(f" matching {rule.describe()}" for rule in rules)
