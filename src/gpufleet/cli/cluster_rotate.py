"""`gpufleet cluster rotate NAME`: new federation tokens for a joined worker, with no gap and no restart.

A join's two tokens (the manager's in the worker, the worker's in the manager) expire
(`--token-ttl`). Rotating them must not stop the work: at no moment may the manager be unable to reach
the worker, or the worker unable to report (its lease would lapse and the manager move its work). So,
run with the admin token of each plane as `join` is:

1. both planes are asked first (the worker's join Secret, the manager's Cluster): one that does not
   answer fails the rotation before anything changed;
2. a new token of each role is minted beside the old one (`replace: false`: both are valid);
3. each side is handed its new token as `join` hands it (the worker's join Secret, naming the same
   manager URL and cluster as before, so the worker keeps its agent and lease: only a new manager
   fences managed work; then the manager's token Secret, which gives the manager a new client);
4. it waits until each new token has been used once (the worker reported with it, the manager read
   the worker with it: the planes record a token's first use);
5. only then the old tokens are revoked (all of the role but the new one).

A failure before step 3 takes back what was minted and leaves the old tokens as they were; one while
handing out or waiting revokes nothing, so each side keeps a token that works, and names the side
that failed. Running `rotate` again finishes the job (it revokes every token but its own new ones).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Annotated

import typer

from gpufleet.api.errors import GpuFleetError, NotFoundError, ValidationError
from gpufleet.api.secret import SYSTEM_NAMESPACE
from gpufleet.cli.client import PREFIX, ApiError, Client
from gpufleet.cli.cluster import ManagerToken, ManagerUrl, Name, Server, State, Token
from gpufleet.cli.cluster_tokens import (
    DEFAULT_TOKEN_TTL,
    TokenTtl,
    mint,
    parse_ttl,
    revoke,
    used,
    worker_admin,
)
from gpufleet.cli.output import console
from gpufleet.federation.expiry import lifetime
from gpufleet.federation.join import (
    JOINED_AS_ANNOTATION,
    MANAGER_SECRET,
    MANAGER_URL_ANNOTATION,
    JoinSettings,
    join_secret,
    token_secret,
)
from gpufleet.server.federation_access import MANAGER_ROLE, WORKER_ROLE

POLL_SECONDS = 0.2


class RotationError(ApiError):
    """A side did not use its new token in time (an operation that failed: exit code 1)."""


@contextlib.contextmanager
def _side(side: str, left: str) -> Iterator[None]:
    """Errors of a call to one side, said with that side and what the rotation left in place; of the
    same class, so the exit code still tells a plane that failed from a bad option."""
    try:
        yield
    except GpuFleetError as exc:
        message = f"{side} failed: {exc}; {left}"
        try:
            said = type(exc)(message)
        except TypeError:  # pragma: no cover - every GpuFleetError takes a message
            said = ApiError(message)
        raise said from None


def rotate(
    name: Name,
    manager: ManagerUrl,
    manager_token: ManagerToken,
    token_ttl: TokenTtl = DEFAULT_TOKEN_TTL,
    wait_seconds: Annotated[
        float,
        typer.Option("--wait-seconds", min=1.0, help="How long to wait for each side to use its new token."),
    ] = 60.0,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """New federation tokens for the joined worker NAME (the addressed plane); its work runs on."""
    ttl = parse_ttl(token_ttl)  # refused before anything is sent
    worker = worker_admin(server, token, state, "rotate")
    boss = Client(manager.rstrip("/"), manager_token)
    at_worker, at_manager = f"the worker cluster {name} at {worker.server}", f"the manager at {boss.server}"
    unchanged = "nothing was changed: the old tokens stay valid"

    with _side(at_worker, unchanged):
        manager_url = _joined_url(worker, name, boss.server)
    with _side(at_manager, unchanged):
        boss.get(f"{PREFIX}/clusters/{name}")  # a Cluster the manager does not know is a 404 naming it
    with _side(at_worker, unchanged):
        for_manager = mint(worker, MANAGER_ROLE, name, ttl_seconds=ttl, replace=False)
    with _taken_back(worker, MANAGER_ROLE, name, for_manager.id), _side(at_manager, unchanged):
        for_worker = mint(boss, WORKER_ROLE, name, ttl_seconds=ttl, replace=False)
    times = lifetime((for_manager.expires, for_worker.expires), ttl)

    # The worker first: it reports with its new token while the manager still reaches it with its old.
    settings = JoinSettings(manager_url, for_worker.token, name)
    with (
        _taken_back(worker, MANAGER_ROLE, name, for_manager.id),
        _taken_back(boss, WORKER_ROLE, name, for_worker.id),
        _side(at_worker, unchanged),
    ):
        worker.apply([join_secret(settings, lifetime=times).to_dict(reveal_secrets=True)])
    secret, _ = token_secret(name, for_manager.token, lifetime=times)
    half = "the worker reports with its new token, the manager reaches it with the old one: rotate again"
    with _taken_back(worker, MANAGER_ROLE, name, for_manager.id), _side(at_manager, half):
        boss.apply([secret.to_dict(reveal_secrets=True)])

    both = "both sides hold their new tokens and the old ones stay valid: run rotate again once it runs"
    waiting = {
        f"{at_worker} did not report with its new token": (boss, WORKER_ROLE, for_worker.id),
        f"{at_manager} did not reach the worker with its new token": (worker, MANAGER_ROLE, for_manager.id),
    }
    deadline = time.monotonic() + wait_seconds
    while waiting:
        for what, (client, role, token_id) in list(waiting.items()):
            with contextlib.suppress(GpuFleetError):  # a plane that does not answer now is asked again
                if used(client, role, name, token_id):
                    del waiting[what]
        if waiting and time.monotonic() >= deadline:
            raise RotationError(f"{' and '.join(waiting)} within {wait_seconds:g}s; {both}")
        if waiting:
            time.sleep(POLL_SECONDS)

    with _side(at_manager, "the new tokens work; an old one is still valid: run rotate again"):
        revoke(boss, WORKER_ROLE, name, keep=for_worker.id)
    with _side(at_worker, "the new tokens work; the manager's old token is still valid: run rotate again"):
        revoke(worker, MANAGER_ROLE, name, keep=for_manager.id)
    until = "never expire" if times is None else f"expire at {times.expires.isoformat()}"
    console().print(f"cluster/{name}: new federation tokens in use on both sides, the old ones revoked")
    console().print(f"  the new ones {until}")


def _joined_url(worker: Client, name: str, manager: str) -> str:
    """The manager URL the worker's join Secret names (the worker must be handed the same one, or it
    would take the new token for another manager and fence its work), checking it is joined as `name`.
    A Secret written before these annotations existed names the URL `join` was given: `manager`."""
    try:
        secret = worker.get(f"{PREFIX}/namespaces/{SYSTEM_NAMESPACE}/secrets/{MANAGER_SECRET}")
    except NotFoundError:
        raise NotFoundError(
            f"not joined to a manager (no Secret {SYSTEM_NAMESPACE}/{MANAGER_SECRET}): join it first "
            "with `gpufleet cluster join`",
            obj=f"cluster {name}",
        ) from None
    annotations = secret["metadata"].get("annotations") or {}
    joined_as = annotations.get(JOINED_AS_ANNOTATION, name)
    if joined_as != name:
        raise ValidationError(f"the plane is joined as cluster {joined_as}, not {name}", obj=name)
    url = annotations.get(MANAGER_URL_ANNOTATION, manager)
    assert isinstance(url, str)
    return url


@contextlib.contextmanager
def _taken_back(client: Client, role: str, cluster: str, token_id: str) -> Iterator[None]:
    """On a failure inside, revokes the token just minted (nobody holds it yet); a plane that does not
    answer keeps it until it expires or the next rotation, which revokes every token but its own."""
    try:
        yield
    except GpuFleetError:
        with contextlib.suppress(GpuFleetError):
            revoke(client, role, cluster, only=token_id)
        raise
