from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api import GPUPool, GPUPoolSpec, ObjectMeta, PodRequest, TrainingJob, TrainingJobSpec
from gpufleet.store import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
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
