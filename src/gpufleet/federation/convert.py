"""Between the Cluster kind and the dispatcher's plain data: a worker writes its summary into
`Cluster.status.capacity`, the manager reads a Cluster back as a `ClusterSummary`, and a queue's
`spec.clusters` becomes a `ClusterChoice`. Time is an argument, never read here.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from gpufleet.api.cluster import (
    CLUSTER_LOCATION_KEYS,
    READY,
    Cluster,
    ClusterAffinity,
    ClusterStatus,
    HostGroup,
    HostLabelReport,
    ModeCapacity,
    ModelCapacity,
    SharingModeName,
)
from gpufleet.api.labels import LabelSelector
from gpufleet.api.runtime import NodeTaint
from gpufleet.federation.dispatch import ANY_CLUSTER, ClusterChoice
from gpufleet.federation.hostlabels import HostLabels, LabelGroup
from gpufleet.federation.summary import ClusterSummary, ModelSummary, ModeSummary
from gpufleet.federation.unreported import ALL_COUNTED, Counted
from gpufleet.fleet.request import Taint


def choice_of(affinity: ClusterAffinity | None) -> ClusterChoice:
    """A queue's `spec.clusters` as the dispatcher reads it."""
    if affinity is None:
        return ANY_CLUSTER
    return ClusterChoice(
        allowed=None if affinity.allowed is None else frozenset(affinity.allowed),
        selector=LabelSelector.parse(affinity.selector),
        preferred=frozenset(affinity.preferred),
    )


def capacity_status(models: dict[str, ModelSummary]) -> dict[str, ModelCapacity]:
    """A worker's summary as it reports it in its Cluster's status."""
    return {
        model: ModelCapacity(
            gpus=summary.gpus,
            free_gpus=summary.free_gpus,
            by_sharing={
                # the summary's modes are SharingMode values, the names this field takes
                cast(SharingModeName, mode): ModeCapacity(
                    gpus=m.gpus, free_gpus=m.free_gpus, free_gpu_milli=m.free_gpu_milli, free_mig=m.free_mig
                )
                for mode, m in summary.by_mode.items()
            },
            largest_free_domain={level: summary.largest_free(level) for level in summary.free_domains},
            free_domains={
                level: {str(free): count for free, count in sorted(histogram.items())}
                for level, histogram in summary.free_domains.items()
            },
            host_cpu_milli=summary.host_cpu_milli,
            host_memory_mib=summary.host_memory_mib,
            host_taints=[
                NodeTaint.model_validate({"key": t.key, "value": t.value, "effect": t.effect})
                for t in summary.taints
            ],
            host_labels=None if summary.host_labels is None else _label_report(summary.host_labels),
        )
        for model, summary in models.items()
    }


def _label_report(labels: HostLabels) -> HostLabelReport:
    """The groups with the labels they all share written once (GPU feature discovery puts a few dozen
    labels on every node, most of them the same on every host of a model)."""
    groups = labels.groups
    common = dict(groups[0].labels) if groups else {}
    for group in groups[1:]:
        common = {k: v for k, v in common.items() if group.labels.get(k) == v}
    return HostLabelReport(
        common=common,
        groups=[
            HostGroup(
                labels={k: v for k, v in g.labels.items() if k not in common},
                hosts=g.hosts,
                free_hosts={str(free): count for free, count in sorted(g.free.items())},
                most_free_cpu_milli=_keyed(g.cpu),
                most_free_memory_mib=_keyed(g.memory),
            )
            for g in groups
        ],
        unlisted_keys=sorted(labels.unlisted),
    )


def _host_labels(report: HostLabelReport | None) -> HostLabels | None:
    if report is None:
        return None  # an older worker: any host matches
    groups = [
        LabelGroup(
            {**report.common, **g.labels},
            g.hosts,
            {int(free): count for free, count in g.free_hosts.items() if count},
            _counted(g.most_free_cpu_milli),
            _counted(g.most_free_memory_mib),
        )
        for g in report.groups
    ]
    return HostLabels(groups, frozenset(report.unlisted_keys))


def _keyed(most: dict[int, int] | None) -> dict[str, int] | None:
    return None if most is None else {str(free): value for free, value in sorted(most.items())}


def _counted(most: dict[str, int] | None) -> dict[int, int] | None:
    return None if most is None else {int(free): value for free, value in most.items()}


def _model_summary(capacity: ModelCapacity) -> ModelSummary:
    by_mode: dict[str, ModeSummary] = {
        str(mode): ModeSummary(m.gpus, m.free_gpus, m.free_gpu_milli, dict(m.free_mig))
        for mode, m in capacity.by_sharing.items()
    }
    free_mig: dict[str, int] = {}
    for mode in by_mode.values():
        for profile, count in mode.free_mig.items():
            free_mig[profile] = free_mig.get(profile, 0) + count
    return ModelSummary(
        gpus=capacity.gpus,
        free_gpus=capacity.free_gpus,
        free_share_milli=sum(m.free_gpu_milli for m in by_mode.values()),
        free_mig=free_mig,
        free_domains={
            level: {int(free): count for free, count in histogram.items() if count}
            for level, histogram in capacity.free_domains.items()
        },
        by_mode=by_mode,
        host_cpu_milli=capacity.host_cpu_milli,
        host_memory_mib=capacity.host_memory_mib,
        taints=tuple(Taint(t.key, t.value, t.effect) for t in capacity.host_taints),
        host_labels=_host_labels(capacity.host_labels),
    )


def takes_work(cluster: Cluster, *, now: datetime) -> bool:
    """Whether the manager may send the cluster new work: not draining, Ready, and its last heartbeat
    within its lease."""
    status = cluster.status
    if cluster.spec.drain is not None or status.heartbeat_time is None:
        return False
    if (now - status.heartbeat_time).total_seconds() > cluster.spec.lease_seconds:
        return False
    ready = next((c for c in status.conditions if c.type == READY), None)
    return ready is None or ready.status == "True"


def summary_of(cluster: Cluster, *, now: datetime) -> ClusterSummary:
    """A Cluster as the dispatcher sees it: its reported capacity, labels, prices and whether it takes
    work now."""
    spec = cluster.spec
    labels = dict(cluster.metadata.labels)
    for key, value in zip(CLUSTER_LOCATION_KEYS, (spec.region, spec.zone, spec.network), strict=True):
        if value:
            labels[key] = value
    return ClusterSummary(
        name=cluster.name,
        models={model: _model_summary(c) for model, c in cluster.status.capacity.items()},
        labels=labels,
        prices=dict(spec.price_per_gpu_hour),
        accepting=takes_work(cluster, now=now),
        levels=tuple(cluster.status.topology_levels),
    )


def counted_of(status: ClusterStatus) -> Counted:
    """Which of the manager's dispatches a worker's report counts (`federation.unreported`)."""
    if status.dispatches is None:
        return ALL_COUNTED
    return Counted(status.dispatches.newest, frozenset(status.dispatches.uncounted))
