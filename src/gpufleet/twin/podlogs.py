"""What happened to each pod of the twin, as lines a user reads with `gpufleet logs`.

The twin's pods run no program, so their log is the twin's own account of their lifecycle, written
where it happens: placed on a node, started, a run resumed from a checkpoint, a checkpoint written,
finished, failed (an XID, a lost node), stopped by the control plane (a preemption, a drain, a
suspension). Each line starts with the fleet time it happened at.

Pods are also indexed by the object they serve (a TrainingJob, an InferenceService), so the log of a
job reads across its attempts, the pods of earlier ones included, though those are gone.

The book is bounded (`LINES_PER_POD` lines of each pod, the newest `PODS` pods) and read from other
threads (the HTTP API) while the twin writes: every access holds one lock. Every line gets the next
number of one sequence over all pods, so a reader that follows one pod or a whole job asks for what
came after the last number it saw, even when older lines were dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

LINES_PER_POD = 1000
PODS = 10_000

PodKey = tuple[str, str]
"""(namespace, pod name)."""
OwnerKey = tuple[str, str, str]
"""(namespace, kind, name) of the object a pod serves."""


@dataclass(frozen=True, slots=True)
class LogLine:
    number: int
    pod: str
    at: float
    """When it happened, in fleet seconds (formatted only when read: the simulator writes many)."""
    said: str

    @property
    def text(self) -> str:
        """The line as printed: the fleet time, then what happened."""
        return f"{datetime.fromtimestamp(self.at, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')} {self.said}"


@dataclass(frozen=True, slots=True)
class LogPage:
    """Lines after a given number, oldest first, and the number to ask after next time."""

    lines: list[LogLine]
    next: int


class PodLogBook:
    """Bounded logs of the twin's pods, by (namespace, name) and by the object they serve."""

    def __init__(self, *, lines_per_pod: int = LINES_PER_POD, pods: int = PODS) -> None:
        if pods < 0 or lines_per_pod < 1:
            raise ValueError(
                f"PodLogBook: pods must be >= 0 and lines_per_pod >= 1, got {pods}, {lines_per_pod}"
            )
        self._lock = threading.Lock()
        self._logs: OrderedDict[PodKey, deque[LogLine]] = OrderedDict()
        self._owner_of: dict[PodKey, OwnerKey] = {}
        self._pods_of: dict[OwnerKey, list[PodKey]] = {}
        self._lines_per_pod = lines_per_pod
        self._pods = pods
        self._written = 0

    def write(self, key: PodKey, now: float, text: str, *, owner: tuple[str, str] | None = None) -> None:
        """Adds a line to the pod's log, stamped with the fleet time `now` (seconds); `owner` (kind,
        name), given with a pod's first line, files the pod under the object it serves."""
        if not self._pods:
            return  # a book of no pods keeps nothing
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                log = self._logs[key] = deque(maxlen=self._lines_per_pod)
                if owner is not None:
                    self._file(key, (key[0], *owner))
                while len(self._logs) > self._pods:
                    self._forget(next(iter(self._logs)))  # the pod first logged longest ago
            self._written += 1
            log.append(LogLine(self._written, key[1], now, text))

    def has(self, key: PodKey) -> bool:
        with self._lock:
            return key in self._logs

    def pods_of(self, namespace: str, kind: str, name: str) -> list[str]:
        """The pods logged for the object, first logged first."""
        with self._lock:
            return [pod for _, pod in self._pods_of.get((namespace, kind, name), [])]

    def read(self, namespace: str, pods: Iterable[str], *, after: int = 0) -> LogPage:
        """The lines of these pods numbered after `after`, in the order they were written."""
        with self._lock:
            found = [
                line for pod in pods for line in self._logs.get((namespace, pod), ()) if line.number > after
            ]
            return LogPage(sorted(found, key=lambda line: line.number), max(self._written, after))

    def _file(self, key: PodKey, owner: OwnerKey) -> None:
        self._owner_of[key] = owner
        self._pods_of.setdefault(owner, []).append(key)

    def _forget(self, key: PodKey) -> None:
        del self._logs[key]
        owner = self._owner_of.pop(key, None)
        if owner is not None:
            pods = self._pods_of[owner]
            pods.remove(key)
            if not pods:
                del self._pods_of[owner]
