"""A federation on the digital twin, in one process on one virtual clock: what the federation's
benchmarks (`gpufleet bench federation --failover | --utilisation`) run.

It is `gpufleet up --clusters N` without HTTP: a manager plane running the federation's controller
(`federation.mirror`), and worker planes each with their own store, digital-twin nodes, every
controller and the worker agent (`federation.worker`). The planes reach each other only through the
federation's link protocols (`WorkerClient`, `ManagerLink`), implemented here over the other plane's
store: the network between planes is simulated, and a link can be cut (a partition: every call
raises as an unreachable plane does). Every decision is the real code's: dispatch, lease, fencing,
admission, placement, checkpoints.

This lives in `cli` because it is the one package that may wire the federation to the twin (as
`cli/up_clusters.py` does for `gpufleet up`).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.api import load_objects
from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import NotFoundError
from gpufleet.api.inference import InferenceService
from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import Queue
from gpufleet.api.resource import Resource
from gpufleet.api.runtime import Event
from gpufleet.api.training import TrainingJob
from gpufleet.cli.client import ServerUnreachableError
from gpufleet.controllers.plane import build_manager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.federation.link import EventPage, Managed
from gpufleet.federation.mirror import FederationController
from gpufleet.federation.worker import WorkerAgent
from gpufleet.fleet.state import FleetState
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.store.protocol import Store
from gpufleet.store.sqlite import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.config import TwinConfig
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

QUIET_SECONDS = 3600.0
"""How often pool and queue status and service metrics are written (nothing here reads them), as in
the job simulator: at `gpufleet up`'s minute they would be most of the work."""


class Link:
    """A simulated network link: `cut` makes every call through it fail as an unreachable plane."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cut = False

    def check(self) -> None:
        if self.cut:
            raise ServerUnreachableError(f"{self.name}: partitioned from the other planes")


class StoreWorker:
    """The manager's `WorkerClient` for a worker plane in this process: its store, through a link."""

    def __init__(self, store: Store, link: Link) -> None:
        self.store, self.link = store, link

    def create(self, obj: Managed) -> None:
        self.link.check()
        self.store.apply(obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.link.check()
        with contextlib.suppress(NotFoundError):
            self.store.delete(kind, name, namespace)

    def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.link.check()
        stored = self.store.apply(checkpoint)
        status = stored.status.model_copy(update={"phase": "Complete"})
        self.store.update_status(stored.model_copy(update={"status": status}))

    def list_managed(self) -> list[Managed]:
        self.link.check()
        return [*self.store.list(TrainingJob), *self.store.list(InferenceService)]

    def read_events(self, namespaces: Collection[str], since: str | None) -> EventPage:
        self.link.check()
        # The head first: every Event up to it is in the answer, so reading on from it misses nothing.
        head = self.store.resource_version
        if since is None:
            listed = [e for ns in namespaces for e in self.store.list(Event, namespace=ns)]
            return listed, head
        changes = self.store.events_since(since, kinds=["Event"])  # GoneError when compacted past it
        events = [c.object for c in changes if c.type != "DELETED" and isinstance(c.object, Event)]
        last = changes[-1].resource_version if changes else 0
        return events, str(max(int(head), last, int(since)))

    def list_queues(self) -> list[Queue]:
        self.link.check()
        return list(self.store.list(Queue))

    def read_queue(self, name: str) -> Queue | None:
        self.link.check()
        try:
            return self.store.get(Queue, name)
        except NotFoundError:
            return None

    def apply_queue(self, queue: Queue) -> None:
        self.link.check()
        self.store.apply(queue)

    def delete_queue(self, name: str) -> None:
        self.link.check()
        with contextlib.suppress(NotFoundError):
            self.store.delete(Queue, name)


class StoreManager:
    """A worker's `ManagerLink` to the manager plane in this process, through the worker's link."""

    def __init__(self, store: Store, link: Link) -> None:
        self.store, self.link = store, link

    def read_cluster(self, name: str) -> Cluster:
        self.link.check()
        return self.store.get(Cluster, name)

    def write_cluster_status(self, cluster: Cluster) -> None:
        self.link.check()
        self.store.update_status(cluster)  # checks the resourceVersion, as the HTTP API does


@dataclass
class Plane:
    name: str
    store: SqliteStore
    runtime: Runtime
    link: Link
    twin: Twin | None = None


class CheckpointBucket:
    """The object storage the workers' checkpoints go to (a job's `checkpoint.uri`), reached by every
    cluster whatever happens between the control planes: a job that moves resumes from the newest
    checkpoint in it, as a real trainer does from its bucket, even when the manager never heard of it
    (written while its cluster was cut off). The twin reads a job's checkpoints from its own plane's
    store, so each complete checkpoint with a URI is copied into every other worker's store. Those
    without a URI (`twin://`) stay in their cluster, like a node-local disk."""

    def __init__(self, stores: dict[str, Store]) -> None:
        self.stores = stores
        self.cursors = {name: store.resource_version for name, store in stores.items()}
        self.held: set[tuple[str, str]] = set()

    def sync(self) -> None:
        for name, store in self.stores.items():
            events = store.events_since(self.cursors[name], kinds=("Checkpoint",))
            if events:
                self.cursors[name] = str(events[-1].resource_version)
            for event in events:
                ckpt = event.object
                if event.type == "DELETED" or not isinstance(ckpt, Checkpoint):
                    continue
                key = (ckpt.namespace or "default", ckpt.name)
                if key in self.held or ckpt.status.phase != "Complete" or ckpt.spec.uri.startswith("twin://"):
                    continue
                self.held.add(key)
                copy = Checkpoint(
                    metadata=ObjectMeta(name=ckpt.name, namespace=key[0], labels=dict(ckpt.metadata.labels)),
                    spec=ckpt.spec,
                )
                for other, target in self.stores.items():
                    if other != name:
                        stored = target.apply(copy)
                        status = stored.status.model_copy(update={"phase": "Complete"})
                        target.update_status(stored.model_copy(update={"status": status}))
            # the copies' own events are skipped next time: their keys are held


@dataclass
class TwinFederation:
    """A manager plane and its worker planes on one virtual clock."""

    clock: VirtualClock
    manager: Plane
    workers: dict[str, Plane]
    bucket: CheckpointBucket | None = None
    checks: list[Callable[[], None]] = field(default_factory=list)
    """Called after every plane's settle (an invariant such as 'no job runs twice')."""

    def planes(self) -> list[Plane]:
        return [self.manager, *self.workers.values()]

    def advance(self, seconds: float = 1.0) -> None:
        """Moves the clock on and lets every plane settle (the manager first: it dispatches what the
        workers then start), running the checks after each plane."""
        self.clock.advance_to(self.clock.now() + seconds)
        for plane in self.planes():
            plane.runtime.settle()
            for check in self.checks:
                check()
        if self.bucket is not None:
            self.bucket.sync()

    def running_jobs(self, worker: str) -> set[str]:
        """The TrainingJobs with a pod the worker's twin runs now (its pod records)."""
        twin = self.workers[worker].twin
        assert twin is not None
        return {
            pod.metadata.labels[JOB_LABEL]
            for pod in twin.pods.values()
            if pod.status.phase == "Running" and JOB_LABEL in pod.metadata.labels
        }


def cluster_yaml(name: str, price: float, lease_seconds: float, model: str) -> str:
    # The URL and token are never used: the manager reaches the plane through its store (`StoreWorker`).
    return f"""
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {{name: {name}}}
spec:
  connection: {{embedded: {{url: "http://{name}.twin", tokenSecretRef: {{name: {name}-token, key: token}}}}}}
  pricePerGPUHour: {{{model}: {price}}}
  leaseSeconds: {lease_seconds}
"""


@contextlib.contextmanager
def twin_federation(
    workers: dict[str, tuple[list[Resource], float]],
    manager_objects: list[Resource],
    *,
    model: str,
    lease_seconds: float = 30.0,
    heartbeat_seconds: float = 5.0,
    grace_seconds: float = 10.0,
    config: SchedulerConfig | None = None,
) -> Iterator[TwinFederation]:
    """Builds the planes in a throw-away directory: `workers` maps each worker's name to its objects
    (pools) and price per GPU-hour; the manager gets `manager_objects` (queues) and one Cluster per
    worker. Settings as `gpufleet up --clusters` uses them. Checkpoints with a URI go to one bucket
    every worker reads (`CheckpointBucket`)."""
    clock = VirtualClock()
    with contextlib.ExitStack() as stack:
        # A partitioned plane warns on every call; the level is the process's, so it is put back.
        logger = logging.getLogger("gpufleet")
        stack.callback(logger.setLevel, logger.level)
        logger.setLevel(logging.ERROR)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpufleet-fed-")))

        def open_store(name: str) -> SqliteStore:
            store = SqliteStore.open(
                folder / name, synchronous="OFF", clock=clock.datetime, event_retention=200_000
            )
            stack.callback(store.close)
            return store

        manager_store = open_store("manager")
        links = {name: Link(name) for name in workers}
        stores = {name: open_store(name) for name in workers}
        clusters = [
            obj
            for name, (_objects, price) in workers.items()
            for obj in load_objects(cluster_yaml(name, price, lease_seconds, model))
        ]
        manager_store.apply_many([*manager_objects, *clusters])

        def connect(cluster: Cluster) -> StoreWorker:
            return StoreWorker(stores[cluster.name], links[cluster.name])

        controller = FederationController(manager_store, connect, grace_seconds=grace_seconds)
        manager = Plane(
            "manager",
            manager_store,
            Runtime(manager_store, clock=clock, participants=[controller]),
            Link("manager"),
        )
        planes: dict[str, Plane] = {}
        for name, (objects, _price) in workers.items():
            store = stores[name]
            store.apply_many(objects)
            controllers = build_manager(
                store, config=config, pool_status_seconds=QUIET_SECONDS, queue_status_seconds=QUIET_SECONDS
            )
            scheduling = next(c for c in controllers.controllers if isinstance(c, SchedulingController))

            def fleet(scheduling: SchedulingController = scheduling) -> FleetState | None:
                return None if scheduling.cache is None else scheduling.cache.fleet

            agent = WorkerAgent(
                store,
                name,
                StoreManager(manager_store, links[name]),
                fleet,
                heartbeat_seconds=heartbeat_seconds,
            )
            twin = Twin(store, clock=clock, config=TwinConfig(metrics_interval_seconds=QUIET_SECONDS))
            runtime = Runtime(store, clock=clock, participants=[twin, controllers, agent])
            planes[name] = Plane(name, store, runtime, links[name], twin)
        yield TwinFederation(clock, manager, planes, CheckpointBucket(dict(stores)))
