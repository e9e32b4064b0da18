"""The scheduling controller's workload table: the short-demand pass sees exactly the workloads that
can carry a node-demand mark, in the order a walk of every workload would have met them."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.requests import PodRequest
from gpufleet.api.runtime import NodeDemand, OwnerRef, Workload, WorkloadPodSet, WorkloadSpec
from gpufleet.controllers.scheduling.workloadtable import WorkloadTable

CHECKPOINTED = datetime(2026, 1, 1, tzinfo=UTC)


def workload(
    name: str, *, phase: str = "Admitted", checkpoint: datetime | None = None, elastic: bool = True
) -> Workload:
    spec = WorkloadSpec(
        owner=OwnerRef(kind="TrainingJob", name=name),
        pod_sets=[WorkloadPodSet(count=2, min_count=1 if elastic else None, request=PodRequest(gpus=8))],
        last_checkpoint_time=checkpoint,
    )
    obj = Workload(metadata=ObjectMeta(name=name, namespace="team"), spec=spec)
    obj.status.phase = phase  # type: ignore[assignment]
    return obj


def walked(table: WorkloadTable) -> list[str]:
    """What the pass must look at: every Admitted workload that carries a mark, or that is elastic
    (only those run short of pods) and checkpointed (only those grow)."""
    return [
        key
        for key, obj in table.items()
        if obj.status.phase == "Admitted"
        and (
            obj.status.node_demand is not None
            or (obj.spec.last_checkpoint_time is not None and (obj.spec.pod_sets[0].min_count or 2) < 2)
        )
    ]


def test_only_admitted_elastic_workloads_that_checkpointed_or_carry_a_mark_are_looked_at() -> None:
    table = WorkloadTable()
    table["a"] = workload("a", checkpoint=CHECKPOINTED)
    table["b"] = workload("b")  # admitted, never checkpointed: nothing to mark
    table["c"] = workload("c", phase="Pending", checkpoint=CHECKPOINTED)
    marked = workload("d", elastic=False)
    marked.status.node_demand = NodeDemand(pools=["spot"])  # a mark is cleared whatever the shape
    table["d"] = marked
    table["e"] = workload("e", checkpoint=CHECKPOINTED, elastic=False)  # a whole gang is never short
    assert [key for key, _ in table.may_need_marks()] == ["a", "d"] == walked(table)
    # Stored again without its mark and checkpoint, `d` leaves; `b` enters once it checkpoints.
    table["d"] = workload("d")
    table["b"] = workload("b", checkpoint=CHECKPOINTED)
    assert [key for key, _ in table.may_need_marks()] == ["a", "b"] == walked(table)
    assert table.may_need_marks()[1][1] is table["b"]


def test_the_order_is_that_of_a_walk_of_the_table_after_removals() -> None:
    table = WorkloadTable()
    for name in ("a", "b", "c"):
        table[name] = workload(name, checkpoint=CHECKPOINTED)
    del table["a"]
    table.pop("b")
    table["a"] = workload("a", checkpoint=CHECKPOINTED)  # stored again: last, as in a dict
    table["b"] = workload("b", checkpoint=CHECKPOINTED)
    table["c"] = workload("c", checkpoint=CHECKPOINTED)  # stored over: keeps its place
    assert [key for key, _ in table.may_need_marks()] == ["c", "a", "b"] == walked(table) == list(table)
    assert len(table) == 3 and table.get("gone") is None and table.get("a") is table["a"]
