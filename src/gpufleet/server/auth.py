"""Bearer tokens: one admin token made at first start, and tokens scoped to one queue.

Tokens are 256-bit random strings, so a plain SHA-256 is enough to store them: nothing can be
guessed from the hash, and a slow password hash would only slow every request. The state directory
keeps the hashes in `tokens.json`; the admin token itself is also written, readable by its owner
only, to `admin-token` so that the CLI on the same machine can use it without being told.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.api.errors import ValidationError
from gpufleet.api.meta import check_name
from gpufleet.server.errors import UnauthorizedError

ADMIN_TOKEN_FILE = "admin-token"
TOKENS_FILE = "tokens.json"
_PREFIX = "gft_"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the admin (queue None) or the holder of one queue's token."""

    queue: str | None
    token_id: str

    @property
    def admin(self) -> bool:
        return self.queue is None

    def describe(self) -> str:
        return "the admin token" if self.admin else f"a token of queue {self.queue}"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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

    def __init__(self, state_dir: str | Path) -> None:
        self._dir = Path(state_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = self._load()
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
        if found is None:
            raise UnauthorizedError("unknown token")
        return Principal(queue=found.get("queue"), token_id=digest[:12])

    def create(self, queue: str) -> str:
        """A new token for `queue`; only its hash is kept, so it is shown once."""
        try:
            check_name(queue)
        except ValueError as exc:
            raise ValidationError(str(exc), field="queue") from None
        token = _PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            self._entries[_digest(token)] = {"queue": queue, "created": datetime.now(UTC).isoformat()}
            self._save()
        return token

    def _load(self) -> dict[str, dict[str, Any]]:
        path = self._dir / TOKENS_FILE
        if not path.exists():
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        return {digest: dict(entry) for digest, entry in data.get("tokens", {}).items()}

    def _save(self) -> None:
        _write_private(self._dir / TOKENS_FILE, json.dumps({"tokens": self._entries}, indent=2))

    def _ensure_admin(self) -> str:
        path = self.admin_token_path
        if path.exists():
            token = path.read_text(encoding="utf-8").strip()
            if _digest(token) in self._entries:
                return token
        # First start (or the file was removed): a fresh admin token replaces any earlier one.
        token = _PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            self._entries = {d: e for d, e in self._entries.items() if e.get("queue") is not None}
            self._entries[_digest(token)] = {"queue": None, "created": datetime.now(UTC).isoformat()}
            self._save()
        _write_private(path, token + "\n")
        return token
