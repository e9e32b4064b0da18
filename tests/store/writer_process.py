"""Run as a separate process by test_durability: writes to a store forever, printing each acknowledged write.

Usage: python writer_process.py STATE_DIR PREFIX. Every job is created with 1 replica and each update
adds one, so a consistent job always has generation == replicas.
"""

from __future__ import annotations

import sys

from gpufleet.api import ObjectMeta, PodRequest, TrainingJob, TrainingJobSpec
from gpufleet.store import SqliteStore


def main(state_dir: str, prefix: str) -> None:
    store = SqliteStore.open(state_dir)
    print("ready", flush=True)
    index = 0
    while True:
        name = f"{prefix}-{index}"
        created = store.create(
            TrainingJob(
                metadata=ObjectMeta(name=name, namespace="durable"),
                spec=TrainingJobSpec(replicas=1, worker=PodRequest(gpus=1)),
            )
        )
        print(f"create {name} 1 {created.metadata.resource_version}", flush=True)
        if index:
            previous = store.get(TrainingJob, f"{prefix}-{index - 1}", "durable")
            previous.spec.replicas += 1
            updated = store.update(previous)
            print(
                f"update {updated.name} {updated.spec.replicas} {updated.metadata.resource_version}",
                flush=True,
            )
        index += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
