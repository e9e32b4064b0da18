"""Run as a separate process by test_durability: applies batches to a store forever, printing each
acknowledged batch.

Usage: python batch_writer_process.py STATE_DIR PREFIX SIZE. Batch i creates SIZE jobs labelled
`batch=PREFIX-i` with 1 replica and, in the same batch, raises the replicas of batch i-1's jobs to
2, so in a consistent store every batch is there whole or not at all, all its jobs have the same
replicas, and those are 2 exactly when the next batch is there.
"""

from __future__ import annotations

import sys

from gpufleet.api import ObjectMeta, PodRequest, Resource, TrainingJob, TrainingJobSpec
from gpufleet.store import SqliteStore

NAMESPACE = "batches"
RETENTION = 10_000_000  # keep every event: the test checks the whole log


def batch_jobs(prefix: str, index: int, size: int, replicas: int) -> list[Resource]:
    return [
        TrainingJob(
            metadata=ObjectMeta(
                name=f"{prefix}-{index}-{j}", namespace=NAMESPACE, labels={"batch": f"{prefix}-{index}"}
            ),
            spec=TrainingJobSpec(replicas=replicas, worker=PodRequest(gpus=1)),
        )
        for j in range(size)
    ]


def main(state_dir: str, prefix: str, size: int) -> None:
    store = SqliteStore.open(state_dir, event_retention=RETENTION)
    print("ready", flush=True)
    index = 0
    while True:
        objects = batch_jobs(prefix, index, size, 1)
        if index:
            objects += batch_jobs(prefix, index - 1, size, 2)
        results = store.apply_many(objects)
        first, last = results[0].metadata.resource_version, results[-1].metadata.resource_version
        print(f"batch {prefix}-{index} {first} {last}", flush=True)
        index += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
