"""The work of one training job in the twin: progress, checkpoints and completion.

A job computes `durationSeconds` of work with all its replicas; with fewer (an elastic job shrunk)
it progresses proportionally slower, and a gang whose pods are spread over slow links (racks,
blocks) progresses `slowdown` times slower (`TwinConfig.gang_slowdown`). A run starts from the step
of its latest complete Checkpoint (one step is one second of full-size work), so after an
interruption only the work since that checkpoint is redone. Checkpoints are written every
`checkpoint.intervalSeconds` of run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpufleet.twin.loop import Timer


@dataclass(slots=True)
class Run:
    """One uninterrupted run of a job. `progress` is work done (seconds) as of `updated`."""

    job: str
    namespace: str
    duration: float | None
    interval: float | None
    replicas: int
    progress: float
    updated: float
    running: int = 0
    slowdown: float = 1.0
    """How many times slower its running pods compute than in one domain, from where they are."""
    timers: list[Timer] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.running / self.replicas / self.slowdown if self.replicas else 0.0

    def advance(self, now: float) -> None:
        self.progress += (now - self.updated) * self.rate
        self.updated = now

    def cancel(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()

    def next_checkpoint(self) -> float | None:
        """Progress at which the next checkpoint is written (None: no checkpoint policy, or done)."""
        if self.interval is None:
            return None
        target = (math.floor(self.progress / self.interval + 1e-9) + 1) * self.interval
        if self.duration is not None and target >= self.duration:
            return None
        return target

    def time_to(self, target: float) -> float | None:
        """Seconds of wall/virtual time until `progress` reaches `target` at the current rate."""
        if self.rate <= 0:
            return None
        return max(0.0, (target - self.progress) / self.rate)
