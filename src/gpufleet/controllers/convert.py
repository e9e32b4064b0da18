"""Translations between stored objects (Node, Pod, Workload, Queue) and the scheduling core's types.

Names. A Workload `ns/name` is the core workload `ns/name`; its pods are the core's
`ns/name/{podSet}/{index}` and the stored Pods `{name}-{podSet}-{index}` in namespace `ns`.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.queue import Queue
from gpufleet.api.requests import PodRequest as ApiPodRequest
from gpufleet.api.runtime import Node, Pod
from gpufleet.api.runtime import Workload as WorkloadObject
from gpufleet.controllers.workload_class import workload_class
from gpufleet.fleet.node import NodeSpec, SharingMode
from gpufleet.fleet.request import PodRequest, Taint, Toleration
from gpufleet.fleet.state import Allocation, FleetState, MigSlot
from gpufleet.scheduler.queueing import QueueSettings
from gpufleet.scheduler.quota import FlavorLimits, QuotaNode, QuotaTree
from gpufleet.scheduler.settings import queue_settings
from gpufleet.scheduler.workload import PodSet, TopologyRequest, Workload

DEFAULT_QUEUE = "default"


def workload_key(namespace: str | None, name: str) -> str:
    return f"{namespace or 'default'}/{name}"


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def pod_object_name(workload_name: str, pod_set: str, index: int) -> str:
    return f"{workload_name}-{pod_set}-{index}"


def core_pod_name(pod: Pod) -> str:
    return f"{workload_key(pod.namespace, pod.spec.workload)}/{pod.spec.pod_set}/{pod.spec.index}"


def split_core_pod(name: str) -> tuple[str, str, int]:
    """`ns/workload/podSet/index` -> (workload key, pod set, index)."""
    workload, pod_set, index = name.rsplit("/", 2)
    return workload, pod_set, int(index)


def pod_request(request: ApiPodRequest) -> PodRequest:
    return PodRequest(
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
        gpus=request.gpus or 0,
        gpu_milli=request.gpu_milli or 0,
        mig=request.mig,
        gpu_models=request.gpu_models,
        tolerations=tuple(
            Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
            for t in request.tolerations or ()
        ),
        node_selector=tuple(sorted((request.node_selector or {}).items())),
        cuda_version=request.cuda,
        node_affinity=request.node_affinity,
    )


def core_workload(obj: WorkloadObject) -> Workload:
    spec = obj.spec
    created = obj.metadata.creation_timestamp
    admitted = obj.status.admitted_time if obj.status.phase == "Admitted" else None
    checkpoint = spec.last_checkpoint_time
    key = workload_key(obj.namespace, obj.name)
    return Workload(
        name=key,
        pod_sets=tuple(
            PodSet(ps.name, ps.count, pod_request(ps.request), ps.min_count) for ps in spec.pod_sets
        ),
        queue=spec.queue,
        priority=spec.priority,
        topology=TopologyRequest(spec.topology.required, spec.topology.preferred),
        preemptible=spec.preemptible,
        user=spec.user,
        submitted_at=created.timestamp() if created else 0.0,
        admitted_at=admitted.timestamp() if admitted else None,
        last_checkpoint_at=checkpoint.timestamp() if checkpoint else None,
        # The rule Kubernetes pods follow too: the owner's kind decides, else what the spec states.
        workload_class=workload_class(
            [spec.owner.kind], spec.workload_class, obj=f"Workload {key}", field="spec.workloadClass"
        ),
    )


def node_spec(node: Node) -> NodeSpec:
    spec = node.spec
    sharing = spec.sharing
    mode, replicas, layouts = SharingMode.EXCLUSIVE, 1, {}
    if sharing.time_slicing is not None:
        mode, replicas = SharingMode.TIME_SLICING, sharing.time_slicing.replicas
    elif sharing.mps is not None:
        mode, replicas = SharingMode.MPS, sharing.mps.replicas
    elif sharing.mig is not None and not spec.dra:
        # A `dra` node's MIG GPUs are partitioned by its claims (dynamic MIG, fleet/dynmig.py): no
        # fixed layout; `sharing.mig` only says which GPUs publish MIG devices (twin/draslices.py).
        mode = SharingMode.MIG
        for gpu in range(spec.gpus):
            layout = sharing.mig.get(str(gpu), sharing.mig.get("*"))
            if layout is not None:
                layouts[gpu] = tuple(layout)
    return NodeSpec(
        name=node.name,
        gpu_model=spec.gpu_model,
        gpus=spec.gpus,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        labels=dict(node.metadata.labels),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in spec.taints),
        unschedulable=not schedulable(node),
        nvlink_domains=None if spec.nvlink_domains is None else tuple(tuple(d) for d in spec.nvlink_domains),
        sharing=mode,
        replicas=replicas,
        mig_layouts=layouts,
        unhealthy_gpus=tuple(node.status.unhealthy_indices),
        driver_version=spec.driver_version or "",
    )


def schedulable(node: Node) -> bool:
    """New pods may land on a node that is Ready, not cordoned and not about to be taken back."""
    return (
        node.status.phase == "Ready" and not node.spec.unschedulable and node.status.interruption_time is None
    )


def same_shape(a: NodeSpec, b: NodeSpec) -> bool:
    """Whether two specs differ only in what the fleet can change in place (cordon, health)."""
    keep = (
        "gpu_model",
        "gpus",
        "cpu_milli",
        "memory_mib",
        "labels",
        "taints",
        "nvlink_domains",
        "sharing",
        "driver_version",
    )
    return all(getattr(a, f) == getattr(b, f) for f in keep) and a.mig_layouts == b.mig_layouts


def allocation(pod: Pod, fleet: FleetState) -> Allocation:
    """The allocation a bound pod holds (its node must be in the fleet)."""
    spec = pod.spec
    mig = None if spec.mig is None else MigSlot(spec.mig.gpu, spec.mig.profile, spec.mig.start)
    return Allocation(
        pod=core_pod_name(pod),
        node=fleet.row_of(spec.node_name),
        gpus=tuple(spec.gpus),
        milli=spec.gpu_milli,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        mig=mig,
    )


def quota_tree(queues: Iterable[Queue]) -> tuple[QuotaTree, dict[str, QueueSettings]]:
    """The quota tree of the stored queues; none at all means one unlimited queue `default`."""
    items = list(queues)
    if not items:
        return QuotaTree([QuotaNode(DEFAULT_QUEUE, unlimited=True)]), {
            DEFAULT_QUEUE: QueueSettings(DEFAULT_QUEUE)
        }
    nodes = []
    settings = {}
    for queue in items:
        spec = queue.spec
        quotas = {
            flavor: FlavorLimits(round(q.nominal * 1000), _milli(q.borrowing_limit), _milli(q.lending_limit))
            # Insertion order is the order flavors are tried: flavorOrder when the queue gives one.
            for flavor, q in spec.ordered_quotas()
        }
        nodes.append(QuotaNode(queue.name, spec.parent, quotas))
        # The one Queue-to-settings translation (strategy, per-user limit, preemption threshold too).
        settings[queue.name] = queue_settings(queue.name, spec)
    return QuotaTree(nodes), settings


def placeable_quota_tree(
    queues: Iterable[Queue],
) -> tuple[QuotaTree, dict[str, QueueSettings], dict[str, str]]:
    """The quota tree of the queues that can be placed in one, and why each of the others cannot.

    Both worlds build their tree here, so a Queue is judged the same in each: one left out (unknown
    parent, a loop of parents, below such a queue, or anything else the tree refuses) never stops
    scheduling for the rest."""
    usable, broken = usable_queues(queues)
    while True:
        try:
            tree, settings = quota_tree(usable)
            return tree, settings, broken
        except GpuFleetError as exc:
            # Whatever else the tree refuses names the queue at fault: leave that one out too.
            name = (exc.obj or "").removeprefix("Queue ")
            if name not in {q.name for q in usable}:
                raise
            broken[name] = exc.detail
            usable = [q for q in usable if q.name != name]


def usable_queues(queues: Iterable[Queue]) -> tuple[list[Queue], dict[str, str]]:
    """The queues that can form a quota tree, and why each of the others cannot (by name).

    A queue whose parent is unknown, or whose parent links loop, cannot be placed, and neither can
    anything below it. The API refuses such queues, but a store written by an older version or
    directly may still hold one; the rest of the tree must be scheduled regardless."""
    by_name = {q.name: q for q in queues}
    broken: dict[str, str] = {}
    placed: dict[str, bool] = {}
    for name in by_name:
        chain: list[str] = []
        current: str | None = name
        problem = None
        while current is not None and current not in placed:
            if current in chain:
                problem = f"parent links form a cycle through {current!r}"
                break
            chain.append(current)
            parent = by_name[current].spec.parent
            if parent is not None and parent not in by_name:
                problem = f"unknown parent queue {parent!r}"
                break
            current = parent
        in_cycle = problem is not None and current in chain
        if problem is None and current is not None and not placed[current]:
            problem = f"its parent {current!r} is not part of the quota tree"
        for member in reversed(chain):
            placed[member] = problem is None
            if problem is not None:
                # The queue where the walk stopped says what is wrong; those below it, that it is.
                own = by_name[member].spec.parent
                last = member == chain[-1] or in_cycle
                broken[member] = problem if last else f"its parent {own!r} is not part of the quota tree"
    return [q for q in by_name.values() if placed[q.name]], broken


def _milli(gpus: float | None) -> int | None:
    return None if gpus is None else round(gpus * 1000)
