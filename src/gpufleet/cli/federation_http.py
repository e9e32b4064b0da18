"""The federation's links over the embedded HTTP API (`gpufleet up`), on the CLI's client.

`HttpWorker` is the manager's `WorkerClient` for an embedded worker (`Cluster.spec.connection.embedded`
gives its URL); `HttpManager` is a worker's `ManagerLink`. Both send the token they are given; errors
are the client's `GpuFleetError`s, an unreachable plane included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.inference import InferenceService
from gpufleet.api.queue import Queue
from gpufleet.api.resource import Resource
from gpufleet.api.runtime import Event
from gpufleet.api.training import TrainingJob
from gpufleet.api.validation import parse_object
from gpufleet.cli.client import PREFIX, Client
from gpufleet.controllers.manager import ControllerManager
from gpufleet.controllers.scheduling import SchedulingController
from gpufleet.federation.join import JoinedWorker, JoinSettings, worker_token
from gpufleet.federation.link import EventPage, Managed, ManagerLink, WorkerClient
from gpufleet.fleet.state import FleetState
from gpufleet.store.protocol import Store

R = TypeVar("R", bound=Resource)

TIMEOUT_SECONDS = 5.0
"""Of each request between planes: an unreachable plane must not stall a pass for long."""


CHANGES = "/v1/changes"
EVENT_PAGE = 1000
"""Events a page of the change log holds (the server's most); a read follows at most `EVENT_PAGES`."""
EVENT_PAGES = 20

PLURALS = {"TrainingJob": "trainingjobs", "InferenceService": "inferenceservices"}


def _parsed(data: dict[str, Any], kind: type[R]) -> R:
    obj = parse_object(data)
    assert isinstance(obj, kind)
    return obj


class HttpWorker:
    """A worker plane as the manager reaches it."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @classmethod
    def for_cluster(cls, cluster: Cluster, token: str | None) -> HttpWorker:
        embedded = cluster.spec.connection.embedded
        if embedded is None:
            raise ValidationError(
                f"Cluster {cluster.name}: not an embedded worker (no URL to reach it over HTTP)",
                field="spec.connection.embedded",
            )
        return cls(Client(embedded.url, token, timeout=TIMEOUT_SECONDS))

    def create(self, obj: Managed) -> None:
        self.client.apply([obj.to_dict()])

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.client.request("DELETE", f"{PREFIX}/namespaces/{namespace}/{PLURALS[kind]}/{name}")

    def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        path = f"{PREFIX}/namespaces/{checkpoint.namespace}/checkpoints/{checkpoint.name}"
        try:
            current = _parsed(self.client.get(path), Checkpoint)
        except NotFoundError:
            current = None
        if current is not None and _same_checkpoint(current, checkpoint):
            # The worker wrote it itself while the job ran there before: nothing to carry, and the
            # manager's token there may not change the worker's own Checkpoints.
            return
        self.client.apply([checkpoint.to_dict()])
        self.client.request("PUT", path + "/status", json={"metadata": {}, "status": {"phase": "Complete"}})

    def list_managed(self) -> list[Managed]:
        jobs = self.client.get(f"{PREFIX}/{PLURALS['TrainingJob']}")["items"]
        services = self.client.get(f"{PREFIX}/{PLURALS['InferenceService']}")["items"]
        return [
            *(_parsed(item, TrainingJob) for item in jobs),
            *(_parsed(item, InferenceService) for item in services),
        ]

    def read_events(self, namespaces: Collection[str], since: str | None) -> EventPage:
        """A cursor reads the worker's change log of Events (`GET /v1/changes`, page after page): only
        what it wrote since; the manager's token there sees only those about managed work. No cursor
        lists each namespace, and the oldest list's resourceVersion is where the next read goes on."""
        if since is None:
            events: list[Event] = []
            versions = []
            for namespace in namespaces:
                answer = self.client.get(f"{PREFIX}/namespaces/{namespace}/events")
                versions.append(int(answer["metadata"]["resourceVersion"]))
                events += [_parsed(item, Event) for item in answer["items"]]
            return events, str(min(versions)) if versions else None
        events, cursor = [], since
        for _ in range(EVENT_PAGES):
            answer = self.client.get(CHANGES, kind="Event", resourceVersion=cursor, limit=EVENT_PAGE)
            events += [_parsed(c["object"], Event) for c in answer["items"] if c["type"] != "DELETED"]
            if answer["resourceVersion"] == cursor:
                break  # caught up with the worker
            cursor = answer["resourceVersion"]
        return events, cursor

    def list_queues(self) -> list[Queue]:
        return [_parsed(item, Queue) for item in self.client.get(f"{PREFIX}/queues")["items"]]

    def read_queue(self, name: str) -> Queue | None:
        try:
            queue = parse_object(self.client.get(f"{PREFIX}/queues/{name}"))
        except NotFoundError:
            return None
        assert isinstance(queue, Queue)
        return queue

    def apply_queue(self, queue: Queue) -> None:
        self.client.apply([queue.to_dict()])

    def delete_queue(self, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.client.request("DELETE", f"{PREFIX}/queues/{name}")


def _same_checkpoint(current: Checkpoint, carried: Checkpoint) -> bool:
    """Whether the worker's Checkpoint is already the complete one the manager carries."""
    mine, theirs = current.spec, carried.spec
    same = (mine.job, mine.step, mine.uri) == (theirs.job, theirs.step, theirs.uri)
    return same and current.status.phase == "Complete"


class HttpManager:
    """The manager plane as a worker reaches it."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def read_cluster(self, name: str) -> Cluster:
        cluster = parse_object(self.client.get(f"{PREFIX}/clusters/{name}"))
        assert isinstance(cluster, Cluster)
        return cluster

    def write_cluster_status(self, cluster: Cluster) -> None:
        data = cluster.to_dict()
        body = {"metadata": {"resourceVersion": cluster.metadata.resource_version}, "status": data["status"]}
        self.client.request("PUT", f"{PREFIX}/clusters/{cluster.name}/status", json=body)


def connect_embedded(store: Store) -> Callable[[Cluster], WorkerClient]:
    """The manager's `connect`: an embedded worker over HTTP, with the token its Cluster's Secret holds
    in the manager's `store`."""

    def connect(cluster: Cluster) -> WorkerClient:
        return HttpWorker.for_cluster(cluster, worker_token(store, cluster))

    return connect


def manager_link(settings: JoinSettings) -> ManagerLink:
    return HttpManager(Client(settings.url, settings.token, timeout=TIMEOUT_SECONDS))


def joined_worker(store: Store, controllers: ControllerManager, *, heartbeat_seconds: float) -> JoinedWorker:
    """The participant that makes a plane a worker once it is joined to a manager (`cluster join`)."""
    scheduling = next(c for c in controllers.controllers if isinstance(c, SchedulingController))

    def fleet() -> FleetState | None:
        return None if scheduling.cache is None else scheduling.cache.fleet

    return JoinedWorker(store, manager_link, fleet, heartbeat_seconds=heartbeat_seconds)
