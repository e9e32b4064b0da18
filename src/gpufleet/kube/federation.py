"""Federation in the Kubernetes world: the manager's reach into worker clusters and a worker's into the
manager, over API servers (`federation.link`'s two protocols, implemented structurally: like the rest
of `kube/` this module does not import the federation; `cli.kube_federation` runs the two together).

- `KubeWorker` is the manager's `WorkerClient` for a Kubernetes worker: gpufleet's kinds through a
  `KubeStore` on the worker's API server, which the kubeconfig in the Secret its Cluster names
  (`spec.connection.kubeconfigSecretRef`, a core/v1 Secret in the manager cluster) reaches. The
  worker's Events are core/v1 Events, read as gpufleet Events. Its jobs and services, and its Events
  about them, may be watched rather than listed each pass (`kube.worker_cache`).
- `KubeManagerLink` is a worker's `ManagerLink`: its Cluster object, a custom resource in the manager
  cluster, read and its status written (409 on a stale resourceVersion, as the protocol asks).
- `ManagerStore` is the Store the manager's `FederationController` runs on: a `KubeStore` whose Events
  (the manager's own and those mirrored from workers) are written as core/v1 Events, where
  `kubectl describe` finds them.

Every refusal a caller of the protocols cannot cause itself (an unreachable or failing API server) is a
`WorkerUnreachable`, a `GpuFleetError`: the federation core treats it as a plane out of touch.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime
from typing import TypeVar, overload

import pydantic
import yaml
from pydantic import SecretStr

from gpufleet.api.checkpoint import Checkpoint
from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import GpuFleetError, NotFoundError, ValidationError
from gpufleet.api.inference import InferenceService
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.queue import Queue
from gpufleet.api.resource import Resource
from gpufleet.api.runtime import Event
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret, SecretSpec
from gpufleet.api.training import TrainingJob
from gpufleet.kube.console_events import gpufleet_event
from gpufleet.kube.resources import EVENT, NAMESPACE, resource_for
from gpufleet.kube.store import KubeStore, api_error
from gpufleet.kube.transport import ApiError, Json, Transport
from gpufleet.kube.worker_cache import CopyCache

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Resource)
EventPage = tuple[list[Event], str | None]
"""`federation.link.EventPage`: Events after a cursor, and where to read on (None: list again)."""
Managed = TrainingJob | InferenceService
"""What a manager dispatches (`federation.link.Managed`: this package does not import the federation,
whose protocols these classes implement structurally; `cli.kube_federation` puts them together)."""

SECRET_FIELD = "spec.connection.kubeconfigSecretRef"
WORKER_TIMEOUT_SECONDS = 5.0
"""Of connecting to a worker's API server and of each request to it: a worker that hangs must not stall
the manager's pass over every other worker for long (the embedded world's `federation_http` likewise)."""


class WorkerUnreachable(GpuFleetError):
    """An API server of the federation did not answer, or failed what it was asked."""


@contextlib.contextmanager
def reaching(where: str) -> Iterator[None]:
    """Refusals the protocols' callers handle (not found, conflict, invalid) keep their error; the rest
    (unreachable, 5xx, forbidden) say which API server."""
    try:
        yield
    except ApiError as exc:
        error = api_error(exc, obj=where)
        if isinstance(error, GpuFleetError):
            raise error from None
        raise WorkerUnreachable(f"the API server did not serve the request: {exc}", obj=where) from None


class KubeWorker:
    """A Kubernetes worker cluster as the manager reaches it. With a `cache` its jobs and services are
    watched rather than listed each pass (`kube.worker_cache`); it is closed with this object."""

    def __init__(self, api: Transport, *, name: str = "worker", cache: CopyCache | None = None) -> None:
        self.api = api
        self.store = KubeStore(api)
        self.where = f"Cluster {name}"
        self._namespaces: set[str] = set()
        self.cache = cache
        if cache is not None:
            weakref.finalize(self, cache.close)  # a client replaced (its Secret changed) stops watching

    def create(self, obj: Managed) -> None:
        with reaching(self.where):
            self._namespace(obj.namespace or "default")
            created = self.store.create(obj)
        if self.cache is not None:
            self.cache.created(created)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with reaching(self.where), contextlib.suppress(NotFoundError):
            self.store.delete(kind, name, namespace)
        if self.cache is not None:
            self.cache.deleted((kind, namespace, name))

    def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        with reaching(self.where):
            self._namespace(checkpoint.namespace or "default")
            written = self.store.apply(checkpoint)
            if written.status.phase != "Complete":
                written.status.phase = "Complete"
                self.store.update_status(written)

    def list_managed(self) -> list[Managed]:
        if self.cache is not None:
            self.cache.start()
            watched = self.cache.managed()
            if watched is not None:
                return watched
        with reaching(self.where):
            return [*self.store.list(TrainingJob), *self.store.list(InferenceService)]

    def read_events(self, namespaces: Collection[str], since: str | None) -> EventPage:
        """With a cache, the Events its feed saw after the cursor (`kube.worker_events`); without one, or
        while the feed cannot be trusted, each namespace listed whole (no cursor: the next read lists
        again)."""
        if self.cache is not None:
            self.cache.start()
            watched = self.cache.events_after(namespaces, since)
            if watched is not None:
                return _events(watched[0]), watched[1]
        listed: list[Json] = []
        for namespace in namespaces:
            with reaching(self.where):
                listed += self.api.request("GET", EVENT.collection(namespace)).get("items") or []
        return _events(listed), None

    def list_queues(self) -> list[Queue]:
        with reaching(self.where):
            return list(self.store.list(Queue))

    def read_queue(self, name: str) -> Queue | None:
        with reaching(self.where):
            try:
                return self.store.get(Queue, name)
            except NotFoundError:
                return None

    def apply_queue(self, queue: Queue) -> None:
        with reaching(self.where):
            self.store.apply(queue)

    def delete_queue(self, name: str) -> None:
        with reaching(self.where), contextlib.suppress(NotFoundError):
            self.store.delete(Queue, name)

    def _namespace(self, name: str) -> None:
        """The work's namespace exists in the worker (the manager's namespaces are not the worker's)."""
        if name in self._namespaces:
            return
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        try:
            self.api.request("POST", NAMESPACE.collection(), body=body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._namespaces.add(name)


def _events(raw: Iterable[Json]) -> list[Event]:
    events = []
    for item in raw:
        try:
            events.append(Event.model_validate(gpufleet_event(item)))
        except pydantic.ValidationError:
            continue  # an Event without a time or a name: nothing to mirror
    return events


class KubeManagerLink:
    """The manager cluster as a worker reaches it: its Cluster custom resource."""

    def __init__(self, api: Transport) -> None:
        self.store = KubeStore(api)

    def read_cluster(self, name: str) -> Cluster:
        with reaching("the manager cluster"):
            return self.store.get(Cluster, name)

    def write_cluster_status(self, cluster: Cluster) -> None:
        with reaching("the manager cluster"):
            self.store.update_status(cluster)


class ManagerStore(KubeStore):
    """The manager cluster's store: a `KubeStore` that writes gpufleet Events as core/v1 Events and reads
    core/v1 Secrets as gpufleet Secrets (values decoded), so the federation's controller finds the
    Secrets its Clusters name, and their versions, as in the embedded world."""

    @overload
    def get(self, kind: type[R], name: str, namespace: str | None = None) -> R: ...
    @overload
    def get(self, kind: str, name: str, namespace: str | None = None) -> Resource: ...
    def get(self, kind: type[R] | str, name: str, namespace: str | None = None) -> Resource:
        if kind is not Secret and kind != "Secret":
            return super().get(kind, name, namespace)
        ns = namespace or SYSTEM_NAMESPACE
        with reaching("the manager cluster"):
            try:
                found = self._api.request("GET", f"/api/v1/namespaces/{ns}/secrets/{name}")
            except ApiError as exc:
                raise api_error(exc, obj=f"Secret {ns}/{name}") from None
        return secret_of(found)

    def create(self, obj: R) -> R:
        if not isinstance(obj, Event):
            return super().create(obj)
        namespace = obj.namespace or "default"
        with reaching("the manager cluster"):
            try:
                self._api.request("POST", EVENT.collection(namespace), body=core_event(obj))
            except ApiError as exc:
                raise api_error(exc, obj=f"Event {namespace}/{obj.name}") from None
        return obj


def secret_of(raw: Json) -> Secret:
    """A core/v1 Secret as a gpufleet Secret: its values decoded from base64 (text only)."""
    meta = raw.get("metadata") or {}
    where = f"Secret {meta.get('namespace')}/{meta.get('name')}"
    data: dict[str, SecretStr] = {}
    for key, encoded in (raw.get("data") or {}).items():
        try:
            data[key] = SecretStr(base64.b64decode(encoded).decode("utf-8"))
        except ValueError:
            raise ValidationError(
                f"key {key!r} is not base64 of UTF-8 text", obj=where, field="data"
            ) from None
    return Secret(
        metadata=ObjectMeta(
            name=meta.get("name", ""),
            namespace=meta.get("namespace"),
            resource_version=meta.get("resourceVersion"),
        ),
        spec=SecretSpec(type=raw.get("type") or "Opaque", data=data),
    )


def core_event(event: Event) -> Json:
    """A gpufleet Event as the core/v1 Event `kubectl describe` shows beside its object."""
    spec = event.spec
    involved: Json = {"kind": spec.involved_kind, "name": spec.involved_name}
    with contextlib.suppress(ValidationError):
        kind = resource_for(spec.involved_kind)
        involved["apiVersion"] = kind.api_version
        if kind.namespaced:
            involved["namespace"] = event.namespace or "default"
    stamp = _stamp(spec.time)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event.name, "namespace": event.namespace or "default"},
        "involvedObject": involved,
        "reason": spec.reason,
        "message": spec.message[:1024],
        "type": spec.type,
        "source": {"component": spec.source or "gpufleet-federation"},
        "reportingComponent": spec.source or "gpufleet-federation",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def worker_kubeconfig(api: Transport, cluster: Cluster) -> Json:
    """The kubeconfig (parsed) in the Secret the Cluster names, read from the manager cluster."""
    ref = cluster.spec.connection.kubeconfig_secret_ref
    if ref is None:
        raise ValidationError(
            f"Cluster {cluster.name}: not a Kubernetes worker (no kubeconfig Secret)", field=SECRET_FIELD
        )
    where = f"Secret {ref.namespace}/{ref.name}"
    try:
        secret = ManagerStore(api).get(Secret, ref.name, ref.namespace)
    except NotFoundError:
        raise NotFoundError(
            f"{SECRET_FIELD} names {where}, which does not exist", obj=cluster.describe()
        ) from None
    text = secret.spec.data.get(ref.key)
    if text is None:
        raise ValidationError(f"{where} has no key {ref.key!r}", obj=cluster.describe(), field=SECRET_FIELD)
    try:
        config = yaml.safe_load(text.get_secret_value())
    except (ValueError, yaml.YAMLError) as exc:
        raise ValidationError(
            f"{where} key {ref.key!r} is not a kubeconfig: {exc}", obj=cluster.describe(), field=SECRET_FIELD
        ) from None
    if not isinstance(config, dict) or not config.get("clusters"):
        raise ValidationError(
            f"{where} key {ref.key!r} is not a kubeconfig (no clusters)",
            obj=cluster.describe(),
            field=SECRET_FIELD,
        )
    return config


def connect_kube(
    api: Transport,
    transport: Callable[[Json], Transport] | None = None,
    *,
    cache: Callable[[Transport], CopyCache] | None = None,
) -> Callable[[Cluster], KubeWorker]:
    """The manager's `connect` for Kubernetes workers: each through the kubeconfig its Cluster's Secret
    holds in the manager cluster (`api`). `transport` makes the connection from a kubeconfig (tests give
    an in-memory one); `cache`, when given, makes each worker's watched copies."""

    def make(config: Json) -> Transport:
        from gpufleet.kube.client import KubeTransport

        return KubeTransport.from_kubeconfig_data(config, timeout=WORKER_TIMEOUT_SECONDS)

    build = transport or make

    def connect(cluster: Cluster) -> KubeWorker:
        if cluster.spec.connection.kubeconfig_secret_ref is None:
            raise ValidationError(
                f"Cluster {cluster.name}: an embedded worker; the Kubernetes manager reaches only "
                "Kubernetes workers",
                field="spec.connection.embedded",
            )
        config = worker_kubeconfig(api, cluster)
        try:
            reached = build(config)
        except Exception as exc:  # the client's loader fails in many ways on a malformed kubeconfig
            raise ValidationError(
                f"the kubeconfig in its Secret cannot be used: {exc}",
                obj=cluster.describe(),
                field=SECRET_FIELD,
            ) from None
        return KubeWorker(reached, name=cluster.name, cache=cache(reached) if cache is not None else None)

    return connect
