"""The federation tokens of `gpufleet cluster join` and `cluster rotate`, over each plane's API
(`POST/GET/DELETE /v1/tokens`, with the plane's admin token): minted with an expiry, checked for their
first use, revoked."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.api.errors import ValidationError
from gpufleet.cli.client import Client, server_url, state_dir
from gpufleet.cli.client import token as token_of
from gpufleet.server.auth import MAX_TTL_SECONDS
from gpufleet.sim.options import parse_duration

DEFAULT_TOKEN_TTL = "30d"
NEVER = ("0", "never")
TokenTtl = Annotated[
    str,
    typer.Option(
        "--token-ttl",
        metavar="DURATION",
        help="How long the join's federation tokens are valid (90m, 12h, 30d; 0 or never: they never "
        "expire). The manager warns on the Cluster when a tenth of it is left; `gpufleet cluster rotate` "
        "renews them.",
    ),
]


def worker_admin(server: str | None, token: str | None, state: str | Path | None, verb: str) -> Client:
    """A client of the addressed worker plane with its admin token, which `verb` (join, rotate) needs to
    mint the manager's token there; refused, naming --token, where none is given or kept."""
    directory = state_dir(state)
    admin = token_of(token, directory)
    if admin is None:
        raise ValidationError(
            f"{verb} mints the manager's token in the worker: give --token or --state (its admin token)",
            field="--token",
        )
    return Client(server_url(server, directory), admin)


def parse_ttl(text: str) -> float | None:
    """Seconds, or None for tokens that never expire (`0`, `never`)."""
    if text.strip().lower() in NEVER:
        return None
    seconds = parse_duration(text, "--token-ttl")
    if seconds > MAX_TTL_SECONDS:
        raise ValidationError(f"must be at most 100 years (or never), got {text!r}", obj="--token-ttl")
    return seconds


@dataclass(frozen=True, slots=True)
class Minted:
    """A federation token a plane minted: the token, its id there, when it expires (None: never)."""

    token: str
    id: str
    expires: datetime | None

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"Minted(id={self.id!r}, expires={self.expires!r})"


def mint(
    client: Client, role: str, cluster: str, *, ttl_seconds: float | None = None, replace: bool = True
) -> Minted:
    """A federation token of `role` for the worker `cluster`, from the plane `client` reaches (with its
    admin token: another token is refused there with 403). With `replace` False the role's earlier
    tokens stay valid (a rotation revokes them once this one has worked)."""
    body: dict[str, Any] = {"role": role, "cluster": cluster, "replace": replace}
    if ttl_seconds:
        body["ttlSeconds"] = ttl_seconds
    answer = client.request("POST", "/v1/tokens", json=body)
    token = answer.get("token") if isinstance(answer, dict) else None
    if not isinstance(token, str):  # pragma: no cover - the server answers with the token
        raise ValidationError(f"{client.server} answered no token for role {role}", field="role")
    expires = answer.get("expires")
    return Minted(token, str(answer.get("id")), None if expires is None else datetime.fromisoformat(expires))


def revoke(
    client: Client, role: str, cluster: str, *, keep: str | None = None, only: str | None = None
) -> None:
    """Revokes the role's tokens for `cluster` there: all, all but `keep`, or only `only` (ids)."""
    params = {"role": role, "cluster": cluster, "keep": keep, "only": only}
    client.request("DELETE", "/v1/tokens", params={k: v for k, v in params.items() if v is not None})


def used(client: Client, role: str, cluster: str, token_id: str) -> bool:
    """Whether the token `token_id` of the role for `cluster` has been used there (it worked once)."""
    answer = client.get("/v1/tokens", role=role, cluster=cluster)
    return any(item["id"] == token_id and item.get("used") for item in answer["items"])
