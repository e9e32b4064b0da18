"""Bearer tokens: one admin token made at first start, tokens scoped to one queue, and the federation
tokens of a join (`server.federation_access`).

Tokens are 256-bit random strings, so a plain SHA-256 is enough to store them: nothing can be
guessed from the hash, and a slow password hash would only slow every request. The state directory
keeps the hashes in `tokens.json` (the federation tokens under a key of their own, `roles`: a release
that knows no roles reads only `tokens`, and must not take a role token for the admin's); the admin
token itself is also written, readable by its owner only, to `admin-token` so that the CLI on the same
machine can use it without being told.

A federation token may carry an expiry (`gpufleet cluster join --token-ttl`): past it the token is
refused with a 401 that names its role and cluster and when it expired, never the token. Each records
when it was first used, so `gpufleet cluster rotate` revokes the old tokens only once the new ones have
worked. Expiry is on the plane's clock (the `now` it is given), the time line of everything else the
plane stamps; `gpufleet up` runs it at real time unless `--time-scale` says otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpufleet.api.errors import ValidationError
from gpufleet.api.meta import check_name
from gpufleet.server.errors import UnauthorizedError
from gpufleet.server.federation_access import ROLES, WORKER_ROLE, Role
from gpufleet.server.federation_access import describe as describe_role

ADMIN_TOKEN_FILE = "admin-token"
TOKENS_FILE = "tokens.json"
_PREFIX = "gft_"
MAX_TTL_SECONDS = 100 * 365 * 86400.0
"""The longest a federation token may be valid: beyond it no expiry time can be written."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the admin (queue and role None), the holder of one queue's token, or
    the holder of a federation token (`role`, with the worker's `cluster`)."""

    queue: str | None
    token_id: str
    role: Role | None = None
    cluster: str | None = None

    @property
    def admin(self) -> bool:
        return self.queue is None and self.role is None

    def describe(self) -> str:
        if self.role is not None:
            return describe_role(self.role, self.cluster)
        return "the admin token" if self.admin else f"a token of queue {self.queue}"


@dataclass(frozen=True, slots=True)
class RoleToken:
    """A federation token just minted: the token (shown once), its id (the start of its hash, safe to
    show and to name in a revoke) and when it expires (None: never)."""

    token: str
    id: str
    expires: datetime | None

    def __repr__(self) -> str:  # the token stays out of logs
        return f"RoleToken(id={self.id!r}, expires={self.expires!r})"


TOKEN_ID_LENGTH = 12
"""Hex digits of a token's hash that name it (`Principal.token_id`, `RoleToken.id`)."""


def token_digest(token: str) -> str:
    """What is kept of a token: its SHA-256, in hex (the Kubernetes console's Secret keeps the same)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


_digest = token_digest


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe, with the prefix that says it is gpufleet's."""
    return _PREFIX + secrets.token_urlsafe(32)


def _write_private(path: Path, text: str) -> None:
    """Writes a file only its owner can read, atomically: a crash leaves the old file or the new one."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temporary, 0o600)  # the file may have existed with a wider mode
    os.replace(temporary, path)


class TokenRegistry:
    """The tokens of a state directory. Thread-safe; every change is written through at once."""

    def __init__(self, state_dir: str | Path, *, now: Callable[[], datetime] | None = None) -> None:
        """`now`: the plane's clock, which federation tokens expire on (real time by default)."""
        self._dir = Path(state_dir)
        self._now = now or (lambda: datetime.now(UTC))
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries, self._roles = self._load()
        self.admin_token = self._ensure_admin()

    @property
    def admin_token_path(self) -> Path:
        return self._dir / ADMIN_TOKEN_FILE

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization: Bearer ...` header; `UnauthorizedError` otherwise."""
        if not authorization:
            raise UnauthorizedError("a bearer token is required (Authorization: Bearer <token>)")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthorizedError("the Authorization header must be 'Bearer <token>'")
        digest = _digest(token.strip())
        with self._lock:
            # Look every entry up with a constant-time comparison, so timing reveals no prefix.
            found = next((e for d, e in self._entries.items() if hmac.compare_digest(d, digest)), None)
            role = next((e for d, e in self._roles.items() if hmac.compare_digest(d, digest)), None)
        if role is not None:
            self._check_role_token(digest, role)
            token_id = digest[:TOKEN_ID_LENGTH]
            return Principal(queue=None, token_id=token_id, role=role["role"], cluster=role.get("cluster"))
        if found is None:
            raise UnauthorizedError("unknown token")
        return Principal(queue=found.get("queue"), token_id=digest[:TOKEN_ID_LENGTH])

    def _check_role_token(self, digest: str, entry: dict[str, Any]) -> None:
        """Refuses an expired federation token, saying whose and since when; notes its first use."""
        now = self._now()
        expires = entry.get("expires")
        if expires is not None and now >= datetime.fromisoformat(expires):
            who = describe_role(entry["role"], entry.get("cluster"))
            raise UnauthorizedError(
                f"{who} (role {entry['role']}, cluster {entry.get('cluster')}) expired at {expires}; "
                f"new ones come from `gpufleet cluster rotate {entry.get('cluster')}`"
            )
        if "used" not in entry:
            with self._lock:
                # Once per token: `cluster rotate` waits for the new tokens' first use.
                if digest in self._roles and "used" not in self._roles[digest]:
                    self._roles[digest]["used"] = now.isoformat()
                    self._save()

    def create(self, queue: str) -> str:
        """A new token for `queue`; only its hash is kept, so it is shown once."""
        _check_name(queue, "queue")
        token = new_token()
        with self._lock:
            self._entries[_digest(token)] = {"queue": queue, "created": self._now().isoformat()}
            self._save()
        return token

    def create_role(self, role: str, cluster: str) -> str:
        """A new federation token that never expires and replaces the role's earlier ones
        (`mint_role`)."""
        return self.mint_role(role, cluster).token

    def mint_role(
        self, role: str, cluster: str, *, ttl_seconds: float | None = None, replace: bool = True
    ) -> RoleToken:
        """A new federation token (shown once): `federation-worker` for the worker cluster `cluster`
        in its manager, or `federation-manager` for the manager of this plane, which is the worker
        `cluster`. With `replace` it replaces the role's earlier token for that cluster (a worker has
        one manager, so the manager's token replaces any earlier one): a join made again leaves no old
        credential. Without it the earlier ones stay valid until revoked (a rotation revokes them once
        the new one has worked). `ttl_seconds` (None or 0: never) is how long it is valid."""
        if role not in ROLES:
            raise ValidationError(f"unknown role {role!r}; one of {', '.join(ROLES)}", field="role")
        _check_name(cluster, "cluster")
        if ttl_seconds is not None and not 0 <= ttl_seconds <= MAX_TTL_SECONDS:
            raise ValidationError(
                f"must be 0 (never expires) to {MAX_TTL_SECONDS:.0f} seconds (100 years), got {ttl_seconds}",
                field="ttlSeconds",
            )
        token = new_token()
        created = self._now()
        expires = created + timedelta(seconds=ttl_seconds) if ttl_seconds else None
        entry = {"role": role, "cluster": cluster, "created": created.isoformat()}
        if expires is not None:
            entry["expires"] = expires.isoformat()
        with self._lock:
            if replace:
                self._roles = {d: e for d, e in self._roles.items() if not _replaced(e, role, cluster)}
            self._roles[_digest(token)] = entry
            self._save()
        return RoleToken(token, _digest(token)[:TOKEN_ID_LENGTH], expires)

    def role_tokens(self, role: str, cluster: str) -> list[dict[str, Any]]:
        """The role's tokens for `cluster` (as `mint_role` replaces them), without any secret: id,
        role, cluster, created, and expires and used when they are known."""
        with self._lock:
            return [
                {"id": digest[:TOKEN_ID_LENGTH], **entry}
                for digest, entry in self._roles.items()
                if _replaced(entry, role, cluster)
            ]

    def revoke_role(
        self, role: str, cluster: str, *, keep: str | None = None, only: str | None = None
    ) -> int:
        """Removes the role's tokens for `cluster` (as `mint_role` replaces them), but the one whose id
        is `keep`, or only the one whose id is `only`; how many."""

        def goes(digest: str, entry: dict[str, Any]) -> bool:
            token_id = digest[:TOKEN_ID_LENGTH]
            return _replaced(entry, role, cluster) and token_id != keep and only in (None, token_id)

        with self._lock:
            kept = {d: e for d, e in self._roles.items() if not goes(d, e)}
            removed = len(self._roles) - len(kept)
            if removed:
                self._roles = kept
                self._save()
        return removed

    def _load(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        path = self._dir / TOKENS_FILE
        if not path.exists():
            return {}, {}
        data = json.loads(path.read_text(encoding="utf-8"))
        tokens = {digest: dict(entry) for digest, entry in data.get("tokens", {}).items()}
        roles = {
            digest: dict(entry)
            for digest, entry in data.get("roles", {}).items()
            if entry.get("role") in ROLES  # a role this release does not know grants nothing
        }
        return tokens, roles

    def _save(self) -> None:
        data = {"tokens": self._entries, "roles": self._roles}
        _write_private(self._dir / TOKENS_FILE, json.dumps(data, indent=2))

    def _ensure_admin(self) -> str:
        path = self.admin_token_path
        if path.exists():
            token = path.read_text(encoding="utf-8").strip()
            if _digest(token) in self._entries:
                return token
        # First start (or the file was removed): a fresh admin token replaces any earlier one.
        token = new_token()
        with self._lock:
            self._entries = {d: e for d, e in self._entries.items() if e.get("queue") is not None}
            self._entries[_digest(token)] = {"queue": None, "created": self._now().isoformat()}
            self._save()
        _write_private(path, token + "\n")
        return token


def _replaced(entry: dict[str, Any], role: str, cluster: str) -> bool:
    """Whether a new token of (role, cluster) replaces `entry`: the worker role's per cluster, the
    manager role's whatever cluster it named."""
    return entry.get("role") == role and (role != WORKER_ROLE or entry.get("cluster") == cluster)


class ScopedTokens:
    """The registry's tokens (its admin token) and queue tokens kept elsewhere, e.g. in a Kubernetes
    Secret: `queue_tokens` answers {token digest: queue}. It is asked again once `ttl` seconds have
    passed, so a token added or revoked there counts within that, without a restart; a failure to
    ask keeps the last answer (a queue's page does not go blank while the API server is away)."""

    def __init__(
        self, registry: TokenRegistry, queue_tokens: Callable[[], Mapping[str, str]], *, ttl: float = 5.0
    ) -> None:
        self._registry = registry
        self._read = queue_tokens
        self._ttl = ttl
        self._known: dict[str, str] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> Principal:
        try:
            return self._registry.authenticate(authorization)
        except UnauthorizedError:
            token = (authorization or "").strip().partition(" ")[2].strip()
            if not token:
                raise
        digest = _digest(token)
        queue = next((q for d, q in self._queue_tokens().items() if hmac.compare_digest(d, digest)), None)
        if queue is None:
            raise UnauthorizedError("unknown token")
        return Principal(queue=queue, token_id=digest[:12])

    def _queue_tokens(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= self._ttl:
                try:
                    self._known = dict(self._read())
                except Exception as exc:  # any failure to read keeps what was known
                    log.warning("queue tokens not read again: %s", exc)
                self._read_at = now
            return self._known


def _check_name(value: str, field: str) -> None:
    """A name a token names (its queue or cluster), refused as the request field `field`."""
    try:
        check_name(value)
    except ValueError as exc:
        raise ValidationError(str(exc), field=field) from None
