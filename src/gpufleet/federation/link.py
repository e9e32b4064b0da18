"""How the manager and its workers reach each other: two small protocols and the marks on managed work.

- `WorkerClient`: what the manager does in a worker (create a managed TrainingJob or InferenceService,
  list the copies for their status, delete one when the work moves or is deleted in the manager; give
  the work's queue its quota there, and delete that queue once nothing there names it; read the
  worker's Events from a cursor, so a long event history is not read again every period).
- `ManagerLink`: what a worker does in the manager (read its Cluster, write the Cluster's status).

The embedded implementations speak the HTTP API of `gpufleet up` (`cli/federation_http.py`, over the
CLI's client); a Kubernetes one belongs in `kube/`. Keeping them behind protocols keeps this package
free of HTTP and lets tests cut the network between planes.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.cluster import Cluster
from gpufleet.api.inference import InferenceService
from gpufleet.api.labels import MANAGED_BY_ANNOTATION
from gpufleet.api.queue import Queue
from gpufleet.api.runtime import Event
from gpufleet.api.training import TrainingJob

Managed = TrainingJob | InferenceService
"""What a manager dispatches to workers (`federation.managed` says how each kind differs)."""

MANAGED_BY = MANAGED_BY_ANNOTATION
"""On a worker's copy: the manager that dispatched it. Only such work follows the lease rule."""
GENERATION = "gpufleet.io/assignment-generation"
"""On both copies: which dispatch this is (1, then +1 for each re-dispatch)."""
CLUSTER = "gpufleet.io/cluster"
"""On the manager's object: the cluster that holds it now (absent: waiting for one)."""
MODEL = "gpufleet.io/charged-gpu-model"
"""On the manager's object: the flavor its quota was charged on, a GPU model or a model with a capacity
type (`H100-80GB/spot`), which its worker's queue is granted too."""
MOVED = "gpufleet.io/restarts-in-other-clusters"
"""On the manager's object: restarts counted before its present cluster (in earlier clusters, and one for
each move after it started), added to the worker's count."""
LOST = "gpufleet.io/lost-gpu-seconds-in-other-clusters"
"""On the manager's object: GPU-seconds of work lost before its present cluster (in earlier clusters,
and by each move: what ran since the last checkpoint), added to the worker's count."""
FENCED = "gpufleet.io/fenced"
"""On a worker's copy: the worker stopped it because its lease lapsed; it never starts again there."""


EventPage = tuple[list[Event], str | None]
"""Events a worker wrote after a cursor, and the cursor to read on from (a resourceVersion, or the link's
own count); None when the link cannot read from a cursor: the next read lists again. A plain tuple, so
that `kube/`, which does not import this package, gives the same type."""


class WorkerClient(Protocol):
    """The manager's reach into one worker. Errors raise `GpuFleetError` (unreachable included)."""

    def create(self, obj: Managed) -> None:
        """Creates the worker's copy (a TrainingJob or an InferenceService)."""
        ...

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Removes the worker's copy; no error when it has none."""
        ...

    def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Writes a complete Checkpoint into the worker (a moved job resumes from it there)."""
        ...

    def list_managed(self) -> list[Managed]:
        """Every TrainingJob and InferenceService of the worker (all namespaces)."""
        ...

    def read_events(self, namespaces: Collection[str], since: str | None) -> EventPage:
        """The worker's Events in `namespaces` written (or changed) after the cursor `since`; None: all of
        them. `GoneError` when the worker no longer keeps what came after `since`: read again from None.
        Events outside `namespaces` may be in the page (a cursor follows the whole worker)."""
        ...

    def list_queues(self) -> list[Queue]:
        """Every queue of the worker."""
        ...

    def read_queue(self, name: str) -> Queue | None:
        """The worker's queue of that name, or None when it has none."""
        ...

    def apply_queue(self, queue: Queue) -> None:
        """Creates the worker's queue, or replaces its spec."""
        ...

    def delete_queue(self, name: str) -> None:
        """Deletes a queue the manager made there; no error when it has none. `ConflictError` when
        the worker keeps it (unfinished work names it)."""
        ...


class ManagerLink(Protocol):
    """A worker's reach into the manager. Errors raise `GpuFleetError` (unreachable included)."""

    def read_cluster(self, name: str) -> Cluster: ...

    def write_cluster_status(self, cluster: Cluster) -> None:
        """Replaces the status if `cluster`'s resourceVersion is current, else raises ConflictError."""
        ...
