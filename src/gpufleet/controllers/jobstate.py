"""What a TrainingJob's state is, whatever world runs its workers: the checkpoint to resume from and
whether one more restart is allowed. Shared by the embedded TrainingJob controller's rules and the
Kubernetes operator, so both worlds resume from the same checkpoint and give up at the same count."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.status import CheckpointRef


def latest_checkpoint(checkpoints: Iterable[Checkpoint], job: str) -> Checkpoint | None:
    """The newest complete checkpoint of `job` (by time, then step)."""
    done = [c for c in checkpoints if c.spec.job == job and c.status.phase == "Complete"]
    return max(done, key=_order, default=None)


def _order(ckpt: Checkpoint) -> tuple[float, int]:
    return (ckpt.spec.time.timestamp() if ckpt.spec.time else float("-inf"), ckpt.spec.step)


def checkpoint_ref(ckpt: Checkpoint) -> CheckpointRef:
    return CheckpointRef(name=ckpt.name, step=ckpt.spec.step, time=ckpt.spec.time, uri=ckpt.spec.uri)


def restart_allowed(*, restarts: int, max_restarts: int | None) -> bool:
    """Whether a job that has restarted `restarts` times may restart once more."""
    return max_restarts is None or restarts < max_restarts
