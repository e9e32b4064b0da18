"""Options: the ways of taking each candidate, for one preemptor in one snapshot state (a shrink by 1,
2, ... of its pods, or an evict), each with the quota and the whole GPUs per node it frees; shared by
the bounds and the search of that preemptor.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.fleet.request import GpuKind
from gpufleet.scheduler.cache import Snapshot
from gpufleet.scheduler.flavors import Assignment, split_flavor, usage_of
from gpufleet.scheduler.preemption.kept import milli_at
from gpufleet.scheduler.preemption.order import Candidate, victim_order
from gpufleet.scheduler.workload import Workload


@dataclass(slots=True)
class Option:
    """One way to take from a workload in a search: a candidate (an evict, or a shrink by some of its
    pods), the quota it frees and the whole GPUs it frees per node."""

    candidate: Candidate
    amounts: dict[str, int]
    gpus: dict[int, int]


class Options:
    """Per candidate of one preemptor's search, its options (a shrink's steps kept for the search: the
    same objects each time asked), and per other queue how far it is above its nominal quota in each
    of the preemptor's flavors."""

    def __init__(self, snapshot: Snapshot, preemptor: Workload, assignment: Assignment, now: float) -> None:
        self.snapshot = snapshot
        self.preemptor = preemptor
        self.assignment = assignment
        self.now = now
        self.flavors = set(assignment.usage)
        self.shape = _slots_shape(preemptor, assignment)
        """(whole GPUs per slot, slots needed); None for shared or MIG pods."""
        self.code = (
            None if assignment.model is None else snapshot.fleet.model_id(split_flavor(assignment.model)[0])
        )
        """The fleet's code of the preemptor's GPU model (None: it has none)."""
        self._shrinks: dict[str, list[Candidate]] = {}
        self._room: dict[str, dict[str, int]] = {}

    def room_of(self, queue: str) -> dict[str, int]:
        """How far `queue` is above its nominal quota in each of the preemptor's flavors, as the usage
        was when first asked in this search."""
        room = self._room.get(queue)
        if room is None:
            cache = self.snapshot.cache
            room = {f: cache.usage.usage(queue, f) - cache.tree.nominal(queue, f) for f in self.flavors}
            self._room[queue] = room
        return room

    def shrink_steps(self, full: Candidate) -> list[Candidate]:
        """Shrinks of `full`'s workload by 1, 2, ... of its pods, highest indices first, ending at `full`
        (the shrink to the minimum): a victim loses only the pods the preemptor needs."""
        steps = self._shrinks.get(full.name)
        if steps is not None:
            return steps
        admitted = full.admitted
        workload = admitted.workload
        prefixes = [f"{workload.name}/{ps.name}/" for ps in workload.pod_sets]
        order = sorted(
            full.pods,
            key=lambda pod: (
                -int(pod.rpartition("/")[2]),
                next(i for i, p in enumerate(prefixes) if pod.startswith(p)),
            ),
        )
        steps = []
        for taken in range(1, len(order) + 1):
            pods = tuple(order[:taken])
            counts = tuple(
                count - sum(1 for pod in pods if pod.startswith(prefix))
                for count, prefix in zip(admitted.assignment.counts, prefixes, strict=True)
            )
            if taken == len(order):
                steps.append(full)
                break
            removed = admitted.assignment.gpu_milli - milli_at(admitted, counts)
            rows = tuple(dict.fromkeys(admitted.pods[pod].node for pod in pods))
            step = Candidate(
                admitted,
                "shrink",
                full.cause,
                admitted.lost_gpu_seconds(self.now, removed),
                pods,
                counts,
                rows,
            )
            step.order = victim_order(step)
            steps.append(step)
        self._shrinks[full.name] = steps
        return steps

    def option(self, candidate: Candidate) -> Option:
        admitted = candidate.admitted
        gpus: dict[int, int] = {}
        if candidate.kind == "evict":
            amounts = dict(admitted.assignment.usage)
            pods = list(admitted.pods.values())
        else:
            left = usage_of(admitted.workload, admitted.assignment.model, candidate.counts)
            amounts = {f: amount - left.get(f, 0) for f, amount in admitted.assignment.usage.items()}
            pods = [admitted.pods[pod] for pod in candidate.pods]
        for alloc in pods:
            gpus[alloc.node] = gpus.get(alloc.node, 0) + len(alloc.gpus)
        return Option(candidate, amounts, gpus)


def _slots_shape(preemptor: Workload, assignment: Assignment) -> tuple[int, int] | None:
    """(whole GPUs per slot, slots needed) for a whole-GPU preemptor: slots of the pods' size when every
    pod set asks the same number of GPUs, else single GPUs; None for shared or MIG pods."""
    if assignment.model is None:
        return None
    sizes = set()
    gpus = pods = 0
    for pod_set, count in zip(preemptor.pod_sets, assignment.counts, strict=True):
        if pod_set.request.kind is not GpuKind.WHOLE:
            return None
        if count:
            sizes.add(pod_set.request.gpus)
            pods += pod_set.minimum
            gpus += pod_set.request.gpus * pod_set.minimum
    if len(sizes) == 1:
        size = sizes.pop()
        return (size, pods) if size > 0 else None
    return (1, gpus) if gpus > 0 else None
