"""Where a run resumes: the twin's table of complete checkpoints gives, through any sequence of
writes and deletions, the step a walk over every stored checkpoint would give."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.api.checkpoint import Checkpoint, CheckpointSpec
from gpufleet.api.meta import ObjectMeta
from gpufleet.twin.checkpointsteps import CheckpointSteps

NAMESPACES = ("a", "b")
JOBS = ("j1", "j2")
NAMES = ("c1", "c2", "c3")


def _checkpoint(namespace: str, name: str, job: str, step: int, phase: str) -> Checkpoint:
    ckpt = Checkpoint(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=CheckpointSpec(job=job, step=step, uri=f"s3://b/{name}"),
    )
    return ckpt.model_copy(update={"status": ckpt.status.model_copy(update={"phase": phase})})


def _walk(stored: dict[tuple[str, str], Checkpoint], namespace: str, job: str) -> float:
    progress = 0.0
    for (ns, _), ckpt in stored.items():
        if ns == namespace and ckpt.spec.job == job and ckpt.status.phase == "Complete":
            progress = max(progress, float(ckpt.spec.step))
    return progress


writes = st.tuples(
    st.sampled_from(NAMESPACES),
    st.sampled_from(NAMES),
    st.sampled_from(JOBS),
    st.integers(min_value=0, max_value=10**12),
    st.sampled_from(("Pending", "Complete", "Failed")),
    st.booleans(),  # deleted
)


@given(st.lists(writes, max_size=40))
def test_the_newest_complete_step_is_what_a_walk_over_the_stored_checkpoints_finds(
    changes: list[tuple[str, str, str, int, str, bool]],
) -> None:
    table = CheckpointSteps()
    stored: dict[tuple[str, str], Checkpoint] = {}
    for namespace, name, job, step, phase, deleted in changes:
        ckpt = _checkpoint(namespace, name, job, step, phase)
        if deleted:
            if (namespace, name) not in stored:
                continue
            ckpt = stored.pop((namespace, name))  # a deletion carries the object as it was
        else:
            stored[(namespace, name)] = ckpt  # a job's name may change, its phase go back
        table.take(ckpt, deleted=deleted)
        for ns in NAMESPACES:
            for j in JOBS:
                assert table.newest(ns, j) == _walk(stored, ns, j)


def test_a_job_without_complete_checkpoints_starts_from_zero() -> None:
    table = CheckpointSteps()
    table.take(_checkpoint("a", "c1", "j1", 500, "Pending"), deleted=False)
    assert table.newest("a", "j1") == 0.0
    table.take(_checkpoint("a", "c1", "j1", 500, "Complete"), deleted=False)
    assert table.newest("a", "j1") == 500.0
    assert table.newest("b", "j1") == 0.0  # another namespace's job of the same name
    table.clear()
    assert table.newest("a", "j1") == 0.0
