from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api import GPUPool, GPUPoolSpec, ObjectMeta, PodRequest, TrainingJob, TrainingJobSpec
from gpufleet.store import MemoryStore, SqliteStore

EmbeddedStore = SqliteStore | MemoryStore
"""The two embedded implementations of the Store protocol: every protocol-level test runs on both."""


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedStore]:
    if request.param == "memory":
        with MemoryStore() as in_memory:
            yield in_memory
        return
    with SqliteStore.open(tmp_path, synchronous="NORMAL") as opened:
        yield opened


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    """For what only the SQLite store has: a file to open again."""
    with SqliteStore.open(tmp_path, synchronous="NORMAL") as opened:
        yield opened


def job(
    name: str, namespace: str = "team-a", *, replicas: int = 2, labels: dict[str, str] | None = None
) -> TrainingJob:
    return TrainingJob(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels or {}),
        spec=TrainingJobSpec(replicas=replicas, worker=PodRequest(gpus=8)),
    )


def pool(name: str, nodes: int = 1) -> GPUPool:
    return GPUPool(
        metadata=ObjectMeta(name=name), spec=GPUPoolSpec(gpu_model="H100-80GB", gpus_per_node=8, nodes=nodes)
    )
