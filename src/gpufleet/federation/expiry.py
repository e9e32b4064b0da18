"""When the federation tokens of a join expire, and the manager's warning before they do.

`gpufleet cluster join` and `cluster rotate` mint both tokens of a join together with one lifetime
(`--token-ttl`); the planes refuse each past its expiry (`server.auth`). The expiry is written, in
the clear, as annotations on the Secrets that hold the tokens: the manager's `cluster-NAME-token`, which
its Cluster names, and the worker's join Secret. The tokens themselves stay unreadable, but people and
the manager's controller can see when they run out.

`ExpiryWarnings` is the manager's part (its `FederationController` calls it every pass): once a
cluster's tokens have less than a tenth of their lifetime left, it logs a warning and writes a Warning
Event on the Cluster, once per expiry (a rotation gives a new expiry, which is warned about in its
turn). An Event already there from before a restart counts, so a restarted manager does not warn again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.api.cluster import Cluster
from gpufleet.api.errors import NotFoundError
from gpufleet.api.runtime import Event
from gpufleet.api.secret import Secret
from gpufleet.controllers.events import record
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.store.protocol import Store

log = logging.getLogger(__name__)

ISSUED_ANNOTATION = "gpufleet.io/tokens-issued"
"""On the Secrets of a join: when its federation tokens were minted (RFC 3339)."""
EXPIRES_ANNOTATION = "gpufleet.io/tokens-expire"
"""On the Secrets of a join: when the first of its federation tokens expires (RFC 3339)."""
TOKENS_EXPIRING = "FederationTokensExpiring"
"""The reason of the Warning Event on a Cluster whose tokens near their expiry."""
EVENT_NAMESPACE = "default"
"""Where the Events about a Cluster (a cluster-wide object) are (`controllers.events.record`)."""
WARN_FRACTION = 0.1
"""Warn once less than this share of the tokens' lifetime is left."""


@dataclass(frozen=True, slots=True)
class TokenLifetime:
    """When a join's tokens were minted and when the first of them expires."""

    issued: datetime
    expires: datetime

    def annotations(self) -> dict[str, str]:
        return {ISSUED_ANNOTATION: self.issued.isoformat(), EXPIRES_ANNOTATION: self.expires.isoformat()}

    def warn_from(self) -> datetime:
        """From when on the tokens are about to expire: the last tenth of their lifetime."""
        return self.expires - (self.expires - self.issued) * WARN_FRACTION


def lifetime(expires: Iterable[datetime | None], ttl_seconds: float | None) -> TokenLifetime | None:
    """The lifetime of tokens minted together with `ttl_seconds` (None: they never expire), from the
    expiries the planes answered (each on its own clock): the earliest counts."""
    known = [e for e in expires if e is not None]
    if not ttl_seconds or not known:
        return None
    first = min(known)
    return TokenLifetime(first - timedelta(seconds=ttl_seconds), first)


def lifetime_of(secret: Secret) -> TokenLifetime | None:
    """What a join's Secret says of its tokens' lifetime (None: they never expire, or an older join)."""
    annotations = secret.metadata.annotations
    issued, expires = annotations.get(ISSUED_ANNOTATION), annotations.get(EXPIRES_ANNOTATION)
    if issued is None or expires is None:
        return None
    try:
        return TokenLifetime(datetime.fromisoformat(issued), datetime.fromisoformat(expires))
    except ValueError:
        where = f"{secret.namespace}/{secret.name}"
        log.warning("Secret %s: unreadable token times %r, %r", where, issued, expires)
        return None


class ExpiryWarnings:
    """The manager's warning, once per expiry, about clusters whose tokens near it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._warned: set[tuple[str, datetime]] = set()

    def check(self, clusters: Iterable[Cluster], now: float) -> None:
        when = to_datetime(now)
        for cluster in clusters:
            embedded = cluster.spec.connection.embedded
            if embedded is None:
                continue  # a Kubernetes worker's credentials are its kubeconfig's (docs/federation.md)
            ref = embedded.token_secret_ref
            try:
                times = lifetime_of(self.store.get(Secret, ref.name, ref.namespace))
            except NotFoundError:
                continue  # the controller says so when it connects
            if times is None or when < times.warn_from() or (cluster.name, times.expires) in self._warned:
                continue
            self._warned.add((cluster.name, times.expires))
            stamp = times.expires.isoformat()
            if self._recorded(cluster.name, stamp):
                continue
            verb = "expired" if when >= times.expires else "expire"
            message = (
                f"the federation tokens of cluster {cluster.name} {verb} at {stamp} (minted "
                f"{times.issued.isoformat()}): mint new ones with `gpufleet cluster rotate {cluster.name}`, "
                "which keeps its work running"
            )
            log.warning("cluster %s: %s", cluster.name, message)
            record(self.store, cluster, reason=TOKENS_EXPIRING, message=message, now=now, type="Warning")

    def _recorded(self, cluster: str, stamp: str) -> bool:
        """Whether this warning is there already (written before the manager restarted)."""
        wanted = ("Cluster", cluster, TOKENS_EXPIRING)
        for event in self.store.list(Event, namespace=EVENT_NAMESPACE):
            spec = event.spec
            if (spec.involved_kind, spec.involved_name, spec.reason) == wanted and stamp in spec.message:
                return True
        return False
