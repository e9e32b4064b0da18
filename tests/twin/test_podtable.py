"""The twin's pod table answers a job's pods from its index exactly as a walk over every pod would:
the same pods, in the same order, through sets, replacements and deletions."""

from __future__ import annotations

import pytest

from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import OwnerRef, Pod, PodSpec
from gpufleet.twin.podtable import PodTable


def _pod(name: str, job: str | None, namespace: str = "a", phase: str = "Pending") -> Pod:
    pod = Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, labels={JOB_LABEL: job} if job else {}),
        spec=PodSpec(
            workload=f"{job}-wl",
            owner=OwnerRef(kind="TrainingJob", name=job or "x"),
            pod_set="main",
            index=0,
            node_name="n1",
        ),
    )
    pod.status.phase = phase  # type: ignore[assignment]
    return pod


def _walk(table: PodTable, namespace: str, job: str) -> list[Pod]:
    return [p for (ns, _), p in table.items() if ns == namespace and p.metadata.labels.get(JOB_LABEL) == job]


def test_a_jobs_pods_come_in_the_order_a_walk_gives_through_every_change() -> None:
    table = PodTable()
    steps = [
        ("set", _pod("j1-0", "j1")),
        ("set", _pod("j2-0", "j2")),
        ("set", _pod("j1-1", "j1")),
        ("set", _pod("j1-0", "j1", phase="Running")),  # replaced: keeps its place
        ("set", _pod("j1-0", "j1", namespace="b")),  # same name, another namespace
        ("del", _pod("j1-0", "j1")),
        ("set", _pod("j1-0", "j1")),  # back: goes last
        ("set", _pod("j2-0", "j1")),  # relabelled to another job
        ("set", _pod("loose", None)),
        ("del", _pod("j1-1", "j1")),
    ]
    for action, pod in steps:
        key = (pod.namespace or "default", pod.name)
        if action == "set":
            table[key] = pod
        else:
            del table[key]
        for namespace in ("a", "b"):
            for job in ("j1", "j2"):
                assert table.of_job(namespace, job) == _walk(table, namespace, job)
    assert [p.name for p in table.of_job("a", "j1")] == ["j2-0", "j1-0"]
    assert table.of_job("a", "j1")[1].status.phase == "Pending"
    assert table.of_job("a", "j2") == []


def test_bulk_changes_that_would_bypass_the_index_are_refused() -> None:
    table = PodTable()
    table[("a", "p")] = _pod("p", "j")
    with pytest.raises(TypeError):
        table.pop(("a", "p"))
    with pytest.raises(TypeError):
        table.clear()
    assert table.of_job("a", "j") == [table[("a", "p")]]
