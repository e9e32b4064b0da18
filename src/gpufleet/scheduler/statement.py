"""An undoable log of tentative changes to a FleetState (KAI's Statement).

Every allocate and release made through a Statement is applied to the fleet at once and logged with
what undoes it. A checkpoint is the log's length; `rollback(checkpoint)` undoes back to it, `discard`
undoes everything, `commit` keeps everything and hands back the operations for the world to carry out
(bind the allocated pods, evict the released ones). A gang is tried inside one statement and committed
or discarded, so a failed attempt leaves the arrays byte-identical; this is also why the scheduler
needs no copy of the fleet for what-ifs such as preemption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from gpufleet.fleet.devices import DeviceId
from gpufleet.fleet.dra_claims import ClaimAllocation
from gpufleet.fleet.request import PodRequest
from gpufleet.fleet.state import Allocation, FleetState


class OpKind(Enum):
    ALLOCATE = "allocate"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class Operation:
    """One logged change: a pod got `allocation`, or gave it up."""

    kind: OpKind
    allocation: Allocation

    @property
    def pod(self) -> str:
        return self.allocation.pod


class Observer(Protocol):
    """Anything that caches per-node values and must hear of every change to a row (scoring policies)."""

    def observe(self, state: FleetState, row: int) -> None: ...


class StatementClosed(RuntimeError):
    """A statement was used after commit or discard: a scheduler bug."""


class Statement:
    """Tentative allocations and releases on `state`, undoable until committed."""

    def __init__(self, state: FleetState, *, observers: Sequence[Observer] = ()) -> None:
        self.state = state
        self._observers = list(observers)
        self._log: list[Operation] = []
        self._open = True

    def add_observer(self, observer: Observer) -> None:
        if observer not in self._observers:
            self._observers.append(observer)

    def _notify(self, row: int) -> None:
        for observer in self._observers:
            observer.observe(self.state, row)

    def _check_open(self) -> None:
        if not self._open:
            raise StatementClosed("the statement was already committed or discarded")

    def allocate(
        self,
        pod: str,
        row: int,
        request: PodRequest,
        gpus: Sequence[int] = (),
        *,
        mig_gpu: int | None = None,
        devices: Sequence[DeviceId] = (),
        shared: Sequence[ClaimAllocation] = (),
    ) -> Allocation:
        """Allocates as `FleetState.allocate` does, and logs it."""
        self._check_open()
        alloc = self.state.allocate(pod, row, request, gpus, mig_gpu=mig_gpu, devices=devices, shared=shared)
        self._log.append(Operation(OpKind.ALLOCATE, alloc))
        self._notify(row)
        return alloc

    def release(self, pod: str) -> Allocation:
        """Releases a pod (an eviction, when it was placed before this statement), and logs it."""
        self._check_open()
        alloc = self.state.release(pod)
        self._log.append(Operation(OpKind.RELEASE, alloc))
        self._notify(alloc.node)
        return alloc

    def reinstate(self, alloc: Allocation) -> Allocation:
        """Puts back exactly an allocation released before (a pod that goes on holding it), and logs it."""
        self._check_open()
        self.state.reinstate(alloc)
        self._log.append(Operation(OpKind.ALLOCATE, alloc))
        self._notify(alloc.node)
        return alloc

    def checkpoint(self) -> int:
        """A point to roll back to: the number of operations so far."""
        return len(self._log)

    def rollback(self, checkpoint: int) -> None:
        """Undoes every operation after `checkpoint`, newest first."""
        self._check_open()
        if not 0 <= checkpoint <= len(self._log):
            raise ValueError(f"checkpoint {checkpoint} is outside the log (length {len(self._log)})")
        while len(self._log) > checkpoint:
            op = self._log.pop()
            if op.kind is OpKind.ALLOCATE:
                self.state.release(op.pod)
            else:
                self.state.reinstate(op.allocation)
            self._notify(op.allocation.node)

    def discard(self) -> None:
        """Undoes everything and closes the statement."""
        self.rollback(0)
        self._open = False

    def commit(self) -> list[Operation]:
        """Keeps everything, closes the statement and returns the operations in order.

        A pod allocated and released again inside the statement appears twice; `net_operations` folds
        such pairs away for a world that only needs the end result.
        """
        self._check_open()
        self._open = False
        return list(self._log)

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(self._log)

    @property
    def is_open(self) -> bool:
        return self._open

    def allocated_since(self, checkpoint: int) -> list[Allocation]:
        """Allocations made after `checkpoint` that are still held."""
        held = self.state.allocations
        return [
            op.allocation
            for op in self._log[checkpoint:]
            if op.kind is OpKind.ALLOCATE and held.get(op.pod) is op.allocation
        ]


def net_operations(operations: Sequence[Operation]) -> list[Operation]:
    """The operations without pairs that cancel out (a pod released and put back, or placed and released)."""
    first: dict[str, Operation] = {}
    last: dict[str, Operation] = {}
    for op in operations:
        first.setdefault(op.pod, op)
        last[op.pod] = op
    kept: list[Operation] = []
    for pod, end in last.items():
        start = first[pod]
        if start.kind is OpKind.ALLOCATE and end.kind is OpKind.ALLOCATE:
            kept.append(end)  # placed here, perhaps moved: only where it ends counts
        elif start.kind is OpKind.RELEASE and end.kind is OpKind.RELEASE:
            kept.append(start)  # what it held before the statement is what gets evicted
        elif start.kind is OpKind.RELEASE and start.allocation != end.allocation:
            kept.extend((start, end))  # evicted and placed again elsewhere
        # otherwise the pod ends as it began: placed and released here, or released and put back
    return kept
