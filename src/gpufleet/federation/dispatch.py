"""The dispatcher: chooses the worker cluster of each workload the manager admits.

The manager holds the queues; the quota is the scheduling core's own (`scheduler.quota`), counted over
the whole fleet: a queue's nominal and borrowing limits apply to what it runs in all clusters together,
so there is no second quota system. For each workload, in the order the caller gives (the core's queue
order), the dispatcher:

1. finds the flavors the workload may use, as the cycle does (`scheduler.flavors`): GPU models, or
   models with a capacity type (`H100-80GB/spot`), whose gang is pinned to hosts of that capacity type
   as the core pins it (`scheduler.flavors.pinned`);
2. keeps those its queue's quota, fleet-wide, admits now;
3. ranks the clusters that take new work (not draining, within their lease) and that its queue allows:
   preferred clusters first, then the cheapest (price of the model x GPUs), then the model order, then
   best fit: the tightest host for the gang's biggest pod (`take.tightest_host`: a small pod fills a
   partial host in any cluster before it breaks a whole one, as one cluster's best fit over all its
   hosts would), then the fewest free GPUs of the model (work fills the fullest cluster it fits, so the
   emptier ones keep room for gangs that must fit inside one cluster), then the name (deterministic);
4. takes the first (cluster, model) whose summary the gang fits now (`federation.take`: gang and required
   topology inside one cluster, and every GPU pod fits one of its hosts ever: CPU, memory, taints
   every host carries, and a host whose labels its node selector and required node affinity accept),
   charges the queue and takes the gang out of that summary until the
   cluster's next heartbeat replaces it.

A workload that does not fit any cluster now stays with the manager, with the reason; it is never split
across clusters. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.api.labels import SPOT_TAINT, LabelSelector
from gpufleet.federation.hostlabels import HostRule
from gpufleet.federation.summary import ClusterSummary, ModelSummary
from gpufleet.federation.take import GangShape, take, tightest_host
from gpufleet.fleet.request import GPU_MILLI, GpuKind, PodRequest, Toleration, all_of
from gpufleet.scheduler.flavors import candidate_models, model_of, pinned, split_flavor, usage_of
from gpufleet.scheduler.quota import QuotaShortfall, QuotaUsage
from gpufleet.scheduler.workload import Workload


@dataclass(frozen=True, slots=True)
class ClusterChoice:
    """Which clusters a workload may go to (`allowed` names and `selector`) and which it prefers."""

    allowed: frozenset[str] | None = None
    selector: LabelSelector = field(default_factory=LabelSelector)
    preferred: frozenset[str] = frozenset()

    def allows(self, cluster: ClusterSummary) -> bool:
        if self.allowed is not None and cluster.name not in self.allowed:
            return False
        return self.selector.matches(cluster.labels)


ANY_CLUSTER = ClusterChoice()


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The workload goes to `cluster` on `model`; `usage` (milli-GPU per flavor) is charged to its queue."""

    workload: str
    queue: str
    cluster: str
    model: str | None
    usage: Mapping[str, int]
    cost_per_hour: float
    flavor: str | None = None
    """The flavor its queue is charged on: `model`, or the model with a capacity type (`H100-80GB/spot`),
    which the worker's queue is granted, so its scheduler too places the work on that capacity type."""


@dataclass(frozen=True, slots=True)
class NotDispatched:
    """The workload stays with the manager: `reason` is QueueNotFound, QuotaExceeded or NoCluster."""

    workload: str
    reason: str
    message: str
    details: Mapping[str, object] = field(default_factory=dict)


Decision = Dispatched | NotDispatched


SPOT_TOLERATION = Toleration(SPOT_TAINT, "Exists", effect="NoSchedule")
"""What the worker's operator adds to the pods of a queue with a spot flavor (`kube.owned`): the manager's
copy of the workload does not carry it, so the dispatcher adds it, or it would skip a spot-only cluster."""


def gang_shape(
    workload: Workload,
    counts: tuple[int, ...],
    added: tuple[Toleration, ...] = (),
    templates: Mapping[str, HostRule] | None = None,
) -> GangShape:
    """The pods a gang starts with (`counts` per pod set) as the summary counts them; `added` are
    tolerations its pods get in the worker beside their own, `templates` per pod set name the node
    selector and required node affinity of its pod template, under the request's own node selector
    (which wins on a key both name, as the worker's operator writes the pod)."""
    whole: list[int] = []
    whole_rules: list[HostRule] = []
    whole_needs: list[tuple[int, int]] = []
    rules: list[HostRule] = []
    share: list[int] = []
    mig: list[str] = []
    cpu = memory = 0
    tolerations: set[tuple[Toleration, ...]] = set()
    for pod_set, count in zip(workload.pod_sets, counts, strict=True):
        request = pod_set.request
        rule = HostRule()
        if count and request.kind is not GpuKind.NONE:
            cpu, memory = max(cpu, request.cpu_milli), max(memory, request.memory_mib)
            tolerations.add(request.tolerations + added)
            rule = _host_rule((templates or {}).get(pod_set.name), request)
            if rule and rule not in rules:
                rules.append(rule)
        if request.kind is GpuKind.WHOLE:
            whole.extend([request.gpus] * count)
            whole_rules.extend([rule] * count)
            whole_needs.extend([(request.cpu_milli, request.memory_mib)] * count)
        elif request.kind is GpuKind.SHARE:
            share.extend([request.gpu_milli] * count)
        elif request.kind is GpuKind.MIG:
            assert request.mig is not None
            mig.extend([request.mig] * count)
    return GangShape(
        tuple(whole),
        tuple(share),
        tuple(mig),
        workload.topology.required,
        cpu_milli=cpu,
        memory_mib=memory,
        tolerations=tuple(sorted(tolerations, key=repr)),
        rules=tuple(rules),
        whole_rules=tuple(whole_rules) if rules else (),
        whole_needs=tuple(whole_needs) if any(cpu or memory for cpu, memory in whole_needs) else (),
    )


def _host_rule(template: HostRule | None, request: PodRequest) -> HostRule:
    """The request's node selector over the template's (it wins on a key both name); the request's
    required node affinity and the template's, both of which must hold, as in the worker's pod."""
    if template is None:
        return HostRule(request.node_selector, request.node_affinity)
    merged = dict(template.selector)
    merged.update(request.node_selector)
    return HostRule(tuple(sorted(merged.items())), all_of(template.affinity, request.node_affinity))


class Dispatcher:
    """Clusters' summaries and the fleet-wide quota usage, changed by each decision it makes."""

    def __init__(self, clusters: Iterable[ClusterSummary], quota: QuotaUsage) -> None:
        self.clusters: dict[str, ClusterSummary] = {c.name: c for c in clusters}
        self.quota = quota

    def update(self, summary: ClusterSummary) -> None:
        """A heartbeat: the worker's own count replaces what the dispatcher took out of the old one."""
        self.clusters[summary.name] = summary

    def release(self, decision: Dispatched) -> None:
        """The workload ended (or its cluster was lost): its queue gets the quota back."""
        self.quota.add(decision.queue, decision.usage, -1)

    def gang_for(
        self,
        workload: Workload,
        flavor: str | None,
        counts: tuple[int, ...],
        templates: Mapping[str, HostRule] | None = None,
    ) -> GangShape:
        """The gang as a worker places it on `flavor`: a capacity-typed flavor (`H100-80GB/spot`) only on
        hosts labelled with that capacity type (the core's own pinning, `scheduler.flavors.pinned`), and
        with the spot toleration the worker's operator adds when its queue has a spot flavor."""
        node = self.quota.tree.nodes.get(workload.queue)
        spot = node is not None and any(split_flavor(f)[1] == "spot" for f in node.quotas)
        typed = flavor is not None and split_flavor(flavor)[1] is not None
        shaped = pinned(workload, flavor, counts) if typed else workload
        return gang_shape(shaped, counts, (SPOT_TOLERATION,) if spot else (), templates)

    def dispatch(
        self,
        workload: Workload,
        choice: ClusterChoice = ANY_CLUSTER,
        templates: Mapping[str, HostRule] | None = None,
    ) -> Decision:
        """`templates`: per pod set name, its pod template's node selector and required node affinity
        (the Kubernetes world's; the core's request carries only its own node selector)."""
        tree = self.quota.tree
        if workload.queue not in tree.nodes:
            return NotDispatched(workload.name, "QueueNotFound", f"queue {workload.queue!r} does not exist")
        counts = tuple(ps.minimum for ps in workload.pod_sets)
        node = tree.nodes[workload.queue]
        fleet_models = sorted({m for c in self.clusters.values() for m in c.models})
        flavors = candidate_models(
            workload, queue_flavors=list(node.quotas), fleet_models=fleet_models, unlimited=node.unlimited
        )
        admitted: list[tuple[int, str | None, dict[str, int]]] = []
        shortfall: QuotaShortfall | None = None
        for index, flavor in enumerate(flavors):
            usage = usage_of(workload, flavor, counts)
            short = self.quota.fits(workload.queue, usage)
            if short is None:
                admitted.append((index, flavor, usage))
            elif shortfall is None:
                shortfall = short
        if not admitted:
            if shortfall is None:
                return NotDispatched(workload.name, "QuotaExceeded", "no flavor of its queue fits it")
            return NotDispatched(workload.name, "QuotaExceeded", shortfall.message(), shortfall.details())
        gangs = {flavor: self.gang_for(workload, flavor, counts, templates) for _, flavor, _ in admitted}
        candidates = []
        for cluster in self.clusters.values():
            if not cluster.accepting or not choice.allows(cluster):
                continue
            for index, flavor, usage in admitted:
                model, gang = model_of(flavor), gangs[flavor]
                for summary_model in (model,) if model is not None else tuple(cluster.models):
                    if summary_model in cluster.models:
                        cost = cluster.price(summary_model) * sum(usage.values()) / GPU_MILLI
                        summary = cluster.models[summary_model]
                        tightest = tightest_host(summary, gang)
                        not_preferred = cluster.name not in choice.preferred
                        key = (not_preferred, cost, index, tightest, summary.free_gpus, cluster.name)
                        charged = flavor if flavor is not None else summary_model
                        candidates.append((key, cluster, summary_model, charged, gang, usage))
        gang = next(iter(gangs.values()))  # every flavor's gang has the same pods
        if not candidates and not gang.whole and not gang.share and not gang.mig:
            # CPU-only work needs no GPU model: any allowed cluster that takes work.
            return self._cpu_only(workload, choice)
        candidates.sort(key=lambda found: found[0])
        reasons: dict[str, str] = {}
        for key, cluster, summary_model, charged, gang, usage in candidates:
            after = take(cluster.models[summary_model], gang, cluster.levels, summary_model)
            if isinstance(after, ModelSummary):
                cluster.models[summary_model] = after
                self.quota.add(workload.queue, usage)
                return Dispatched(
                    workload.name, workload.queue, cluster.name, summary_model, usage, key[1], charged
                )
            reasons.setdefault(f"{cluster.name}/{charged}", after)
        return NotDispatched(
            workload.name,
            "NoCluster",
            f"fits no cluster now ({len(candidates)} cluster and model pairs tried"
            + "".join(f"; {pair}: {why}" for pair, why in list(reasons.items())[:3])
            + ")",
            {"clusters": reasons},
        )

    def _cpu_only(self, workload: Workload, choice: ClusterChoice) -> Decision:
        names = sorted(
            (c.name not in choice.preferred, c.name)
            for c in self.clusters.values()
            if c.accepting and choice.allows(c)
        )
        if not names:
            return NotDispatched(workload.name, "NoCluster", "no cluster that takes work is allowed")
        return Dispatched(workload.name, workload.queue, names[0][1], None, {}, 0.0)
