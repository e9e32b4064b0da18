"""Lost work: the GPU-seconds an attempt ran since its last checkpoint, thrown away if it stops now.

One rule for ranking preemption victims (`cache.Admitted`) and for what an eviction records, in the
embedded world (`controllers.scheduling`) and the Kubernetes one (`kube.training`) alike: work counts
from the later of the attempt's start and a checkpoint taken during that attempt. A checkpoint from an
earlier attempt (the one this attempt resumed from) saved nothing this attempt did, so it never moves
the start back. Pure: the caller gives the time, and what its world knows of the attempt's start.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.fleet.request import GPU_MILLI


def attempt_start(pod_starts: Iterable[float | None], admitted_at: float | None) -> float | None:
    """When an attempt began working: its first pod's start, else (no pod reports one yet) the
    admission that gave it its GPUs; None for an attempt never admitted."""
    started = [s for s in pod_starts if s is not None]
    return min(started) if started else admitted_at


def lost_gpu_seconds(
    gpu_milli: int, started_at: float | None, last_checkpoint_at: float | None, now: float
) -> float:
    """GPU-seconds of work lost if an attempt holding `gpu_milli` milli-GPUs, started at `started_at`
    (None: never started, nothing lost) and last checkpointed at `last_checkpoint_at`, stops at `now`."""
    if started_at is None:
        return 0.0
    since = started_at if last_checkpoint_at is None else max(started_at, last_checkpoint_at)
    return gpu_milli / GPU_MILLI * max(0.0, now - since)
