"""Planes joined over the network: the credentials each side keeps, and a worker that starts reporting
once it is told its manager.

`gpufleet cluster join` (cli/cluster.py) writes two Secrets (`api.secret`), one in each plane:

- in the manager, the worker's API token, which its `Cluster.spec.connection.embedded.tokenSecretRef`
  names; the manager's controller reads it here (`worker_token`) to reach the worker;
- in the worker, `gpufleet-system/gpufleet-manager`: the manager's URL, a token for it and the
  worker's cluster name. `JoinedWorker`, a participant of every `gpufleet up` plane, finds it and runs a
  `WorkerAgent` against that manager from then on; without it the plane is a plain one.

So a worker joins, or moves to another manager, while it runs; no credential is ever in a Cluster or a
command line the API echoes back. What is not secret is also written in the clear, as annotations: on
both Secrets when the tokens expire (`federation.expiry`), on the worker's the manager's URL and the
cluster name, which `gpufleet cluster rotate` reads back to hand the worker a new token without naming
another manager (that would fence its managed work).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import SecretStr

from gpufleet.api.cluster import Cluster, SecretKeyRef
from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret, SecretSpec
from gpufleet.federation.expiry import TokenLifetime
from gpufleet.federation.link import ManagerLink
from gpufleet.federation.worker import WorkerAgent
from gpufleet.fleet.state import FleetState
from gpufleet.store.protocol import Store

log = logging.getLogger(__name__)

MANAGER_SECRET = "gpufleet-manager"
"""The Secret (in `gpufleet-system`) of a joined worker: keys `url`, `token` and `cluster`."""
JOIN_KEYS = ("url", "token", "cluster")
MANAGER_URL_ANNOTATION = "gpufleet.io/manager-url"
"""On a worker's join Secret: the manager's URL, as in its `url` key (not a secret)."""
JOINED_AS_ANNOTATION = "gpufleet.io/joined-as"
"""On a worker's join Secret: its cluster name in the manager, as in its `cluster` key."""


def token_secret(
    cluster: str, token: str, *, lifetime: TokenLifetime | None = None
) -> tuple[Secret, SecretKeyRef]:
    """The manager's Secret holding a worker's token, and the reference its Cluster carries;
    `lifetime`: when the join's tokens expire (None: never)."""
    ref = SecretKeyRef(name=f"cluster-{cluster}-token", namespace=SYSTEM_NAMESPACE, key="token")
    annotations = {} if lifetime is None else lifetime.annotations()
    secret = Secret(
        metadata=ObjectMeta(name=ref.name, namespace=ref.namespace, annotations=annotations),
        spec=SecretSpec(type="gpufleet.io/worker-token", data={ref.key: SecretStr(token)}),
    )
    return secret, ref


def join_secret(settings: JoinSettings, *, lifetime: TokenLifetime | None = None) -> Secret:
    """The worker's Secret that names its manager (what `read_join` reads)."""
    data = {"url": settings.url, "token": settings.token, "cluster": settings.cluster}
    annotations = {MANAGER_URL_ANNOTATION: settings.url, JOINED_AS_ANNOTATION: settings.cluster}
    if lifetime is not None:
        annotations |= lifetime.annotations()
    return Secret(
        metadata=ObjectMeta(name=MANAGER_SECRET, namespace=SYSTEM_NAMESPACE, annotations=annotations),
        spec=SecretSpec(type="gpufleet.io/manager", data={k: SecretStr(v) for k, v in data.items()}),
    )


def worker_token(store: Store, cluster: Cluster) -> str:
    """The API token of an embedded worker, from the Secret its Cluster names (in the manager's store)."""
    embedded = cluster.spec.connection.embedded
    if embedded is None:
        raise ValidationError(
            f"Cluster {cluster.name}: not an embedded worker, it has no token",
            field="spec.connection.embedded",
        )
    ref = embedded.token_secret_ref
    try:
        secret = store.get(Secret, ref.name, ref.namespace)
    except NotFoundError:
        raise NotFoundError(
            f"spec.connection.embedded.tokenSecretRef names Secret {ref.namespace}/{ref.name}, which does "
            "not exist",
            obj=cluster.describe(),
        ) from None
    return secret.value(ref.key)


def connection_version(store: Store, cluster: Cluster) -> str:
    """What a client of the worker depends on: its URL (embedded) and the version of the Secret that
    holds its token or its kubeconfig, so a worker that joins again (a new URL or a new token) or whose
    kubeconfig is replaced gets a new client."""
    connection = cluster.spec.connection
    embedded = connection.embedded
    url, ref = (embedded.url, embedded.token_secret_ref) if embedded is not None else ("", None)
    ref = ref or connection.kubeconfig_secret_ref
    if ref is None:
        return url
    try:
        version = store.get(Secret, ref.name, ref.namespace).metadata.resource_version or ""
    except NotFoundError:
        version = ""
    return f"{url} {version}"


@dataclass(frozen=True, slots=True)
class JoinSettings:
    """What a joined worker knows of its manager."""

    url: str
    token: str
    cluster: str

    def __repr__(self) -> str:  # the token stays out of logs
        return f"JoinSettings(url={self.url!r}, cluster={self.cluster!r})"


def read_join(store: Store) -> JoinSettings | None:
    """The worker's join settings, or None when it is not joined (or the Secret lacks a key)."""
    try:
        secret = store.get(Secret, MANAGER_SECRET, SYSTEM_NAMESPACE)
    except NotFoundError:
        return None
    try:
        url, token, cluster = (secret.value(key) for key in JOIN_KEYS)
    except NotFoundError as exc:
        log.warning("not joined to a manager: %s", exc)
        return None
    return JoinSettings(url, token, cluster)


def _token_only(old: JoinSettings | None, new: JoinSettings) -> bool:
    """Whether `new` names the manager and cluster `old` named (with another token)."""
    return old is not None and (old.url, old.cluster) == (new.url, new.cluster)


class JoinedWorker:
    """A plane's participant: a `WorkerAgent` for the manager its join Secret names, while it names one."""

    def __init__(
        self,
        store: Store,
        link: Callable[[JoinSettings], ManagerLink],
        fleet: Callable[[], FleetState | None],
        *,
        heartbeat_seconds: float = 5.0,
        check_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.link = link
        self.fleet = fleet
        self.heartbeat_seconds = heartbeat_seconds
        self.check_seconds = check_seconds
        self.settings: JoinSettings | None = None
        self.agent: WorkerAgent | None = None
        self.next_check = -math.inf

    def step(self, now: float) -> float | None:
        if now >= self.next_check:
            self.next_check = now + self.check_seconds
            settings = read_join(self.store)
            renewed = settings is not None and self.agent is not None and _token_only(self.settings, settings)
            if settings != self.settings and renewed:
                # The plane joined the same manager again, which mints a new token: the lease and the
                # work it covers go on, reached with the new token.
                assert settings is not None and self.agent is not None
                self.settings = settings
                self.agent.manager = self.link(settings)
            elif settings != self.settings:
                self.settings = settings
                if self.agent is not None:
                    self.agent.leave(now)
                # A new manager (or none): a fresh agent, whose lease starts unacknowledged, so managed
                # work waits for the new manager's first ack.
                self.agent = None
                if settings is not None:
                    log.warning("cluster %s: reporting to the manager at %s", settings.cluster, settings.url)
                    self.agent = WorkerAgent(
                        self.store,
                        settings.cluster,
                        self.link(settings),
                        self.fleet,
                        heartbeat_seconds=self.heartbeat_seconds,
                    )
        if self.agent is None:
            return self.next_check
        wake = self.agent.step(now)
        return self.next_check if wake is None else min(wake, self.next_check)
