"""Each job's complete checkpoints, kept from the store's events: where a restarted run resumes.

A run that starts resumes from the newest complete Checkpoint of its job. The twin used to list the
namespace's checkpoints for it at every start, validating each: with checkpoints every 30 minutes,
the few hundred live jobs of a namespace each keep one, and those lists were 8% of a
simulation's CPU. The twin sees every Checkpoint event (and records its own writes at once, since
it may start a run in the same step), so it answers from this table instead.
"""

from __future__ import annotations

from gpufleet.api.checkpoint import Checkpoint

JobKey = tuple[str, str]
"""(namespace, job)."""


class CheckpointSteps:
    """Per job, the step of each of its complete checkpoints, by checkpoint name."""

    def __init__(self) -> None:
        self._steps: dict[JobKey, dict[str, int]] = {}
        self._job_of: dict[tuple[str, str], JobKey] = {}
        """(namespace, checkpoint name) -> the job it is counted for (a checkpoint's job may change)."""

    def clear(self) -> None:
        self._steps.clear()
        self._job_of.clear()

    def take(self, ckpt: Checkpoint, *, deleted: bool) -> None:
        """Takes in one checkpoint as stored now (or its deletion)."""
        namespace = ckpt.namespace or "default"
        where = (namespace, ckpt.name)
        counted = self._job_of.pop(where, None)
        if counted is not None:
            steps = self._steps[counted]
            del steps[ckpt.name]
            if not steps:
                del self._steps[counted]
        if deleted or ckpt.status.phase != "Complete":
            return
        key = (namespace, ckpt.spec.job)
        self._steps.setdefault(key, {})[ckpt.name] = ckpt.spec.step
        self._job_of[where] = key

    def newest(self, namespace: str, job: str) -> float:
        """The highest step among the job's complete checkpoints (0 when it has none)."""
        return float(max(self._steps.get((namespace, job), {}).values(), default=0))
