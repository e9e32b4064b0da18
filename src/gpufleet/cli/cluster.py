"""`gpufleet cluster join|leave|rotate|drain|resume`: worker clusters of a federation, from the command line.

`join` makes a running `gpufleet up` plane (the one `--server`/`--token`/`--state` address, as for every
command) a worker of the management plane at `--manager` (a `gpufleet up --manager`). With the admin
token of each plane it mints a federation token in the other's stead (`server.federation_access`): in
the worker one for the manager, which may write only managed work there; in the manager one for the
worker, which may read its own Cluster and write that Cluster's status, nothing else. It writes, in
one go per plane:

- in the manager, a Secret with the worker's token for it and a `Cluster` whose `embedded.tokenSecretRef`
  names it, the worker's URL, and prices read from the worker's pools (the dearest pool of each model);
- in the worker, the Secret `gpufleet-system/gpufleet-manager` with the manager's URL and the token for
  it, which the worker's runtime picks up within a second and starts reporting (`federation.join`).

Tokens are never printed; the API shows Secret values as `**********`. Joining again (another URL, a
new token) mints new federation tokens, which replace the earlier ones, and replaces both Secrets and
the Cluster's connection. The tokens expire after `--token-ttl` (30 days by default; `never` allowed);
`rotate` (cli/cluster_rotate.py) renews them while the work runs on.

`leave` takes a joined plane out: it drains the Cluster, removes the worker's join Secret (the worker
fences its managed work at once, and the manager takes that work back and dispatches it elsewhere),
waits until the manager holds nothing there, then deletes the Cluster and its token Secret and revokes
both federation tokens.

`drain` sets the Cluster's `spec.drain` in the manager: the dispatcher sends it no new work, and what
runs there finishes, or with `--move-at-checkpoint` moves to other clusters, each job right after its
next checkpoint (`federation.managed.moves_for_drain`). `resume` clears it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

import typer

from gpufleet.api.cluster import (
    Cluster,
    ClusterConnection,
    ClusterDrain,
    ClusterSpec,
    EmbeddedWorker,
)
from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.secret import SYSTEM_NAMESPACE
from gpufleet.cli.client import PREFIX, Client, server_url, state_dir
from gpufleet.cli.client import token as token_of
from gpufleet.cli.cluster_tokens import DEFAULT_TOKEN_TTL, TokenTtl, mint, parse_ttl, revoke, worker_admin
from gpufleet.cli.output import console
from gpufleet.federation.expiry import lifetime
from gpufleet.federation.join import MANAGER_SECRET, JoinSettings, join_secret, token_secret
from gpufleet.federation.link import CLUSTER
from gpufleet.server.federation_access import MANAGER_ROLE, WORKER_ROLE

Name = Annotated[str, typer.Argument(metavar="NAME", help="The cluster's name in the manager.")]
ManagerUrl = Annotated[str, typer.Option("--manager", metavar="URL", help="The management plane's API URL.")]
ManagerToken = Annotated[
    str,
    typer.Option(
        "--manager-token",
        metavar="TOKEN",
        envvar="GPUFLEET_MANAGER_TOKEN",
        help="The manager's admin token (the join mints the worker's own token there from it) "
        "[env GPUFLEET_MANAGER_TOKEN].",
    ),
]
Server = Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")]
Token = Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")]
State = Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")]

DEFAULT_LEASE_SECONDS = 30.0


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="cluster",
        help="Worker clusters of a federation: join, leave, rotate, drain, resume.",
        no_args_is_help=True,
    )
    from gpufleet.cli.cluster_rotate import rotate  # it reuses this module's options

    group.command("join")(join)
    group.command("rotate")(rotate)
    group.command("drain")(drain)
    group.command("resume")(resume)
    group.command("leave")(leave)
    app.add_typer(group)


def join(
    name: Name,
    manager: ManagerUrl,
    manager_token: ManagerToken,
    advertise: Annotated[
        str | None,
        typer.Option(
            "--advertise-url",
            metavar="URL",
            help="The worker's URL as the manager reaches it [default: the --server this command uses].",
        ),
    ] = None,
    region: Annotated[str, typer.Option("--region", help="The cluster's region.")] = "",
    zone: Annotated[str, typer.Option("--zone", help="The cluster's zone.")] = "",
    network: Annotated[str, typer.Option("--network", help="The cluster's network.")] = "",
    lease_seconds: Annotated[
        float,
        typer.Option("--lease-seconds", min=1.0, help="How long the worker may go without a heartbeat."),
    ] = DEFAULT_LEASE_SECONDS,
    token_ttl: TokenTtl = DEFAULT_TOKEN_TTL,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Joins the addressed `gpufleet up` plane to a manager as the worker cluster NAME."""
    ttl = parse_ttl(token_ttl)  # refused before anything is sent
    worker = worker_admin(server, token, state, "the join")
    _, ref = token_secret(name, "")
    prices = pool_prices(worker.get(f"{PREFIX}/gpupools")["items"])  # also checks the worker answers
    cluster = Cluster(
        metadata=ObjectMeta(name=name),
        spec=ClusterSpec(
            connection=ClusterConnection(
                embedded=EmbeddedWorker(url=advertise or worker.server, token_secret_ref=ref)
            ),
            region=region,
            zone=zone,
            network=network,
            price_per_gpu_hour=prices,
            lease_seconds=lease_seconds,
        ),
    )
    boss = Client(manager.rstrip("/"), manager_token)
    _rejoining(boss, cluster)
    # Minted once both planes answered and the name is free: each replaces the role's earlier token.
    for_manager = mint(worker, MANAGER_ROLE, name, ttl_seconds=ttl)
    for_worker = mint(boss, WORKER_ROLE, name, ttl_seconds=ttl)
    times = lifetime((for_manager.expires, for_worker.expires), ttl)
    secret, _ = token_secret(name, for_manager.token, lifetime=times)
    settings = JoinSettings(manager.rstrip("/"), for_worker.token, name)
    boss.apply([secret.to_dict(reveal_secrets=True), cluster.to_dict()])
    worker.apply([join_secret(settings, lifetime=times).to_dict(reveal_secrets=True)])
    out = console()
    out.print(f"cluster/{name} joined the manager at {settings.url}: {worker.server} reports into it")
    until = "never expire" if times is None else f"expire at {times.expires.isoformat()}"
    out.print(f"  its federation tokens {until}")
    out.print("  `gpufleet get clusters` on the manager shows its capacity and heartbeat")


def _rejoining(boss: Client, cluster: Cluster) -> None:
    """Joining again under a name the manager knows: only from the same URL (another plane would take
    over that cluster's work), and a drain set on it stays."""
    try:
        existing = boss.get(f"{PREFIX}/clusters/{cluster.name}")
    except NotFoundError:
        return
    spec = existing.get("spec") or {}
    url = ((spec.get("connection") or {}).get("embedded") or {}).get("url")
    embedded = cluster.spec.connection.embedded
    if embedded is not None and url != embedded.url:
        raise ConflictError(
            f"already joined from {url}: leave it first (gpufleet cluster leave) or give another name",
            obj=f"Cluster {cluster.name}",
        )
    if spec.get("drain") is not None:
        cluster.spec.drain = ClusterDrain.model_validate(spec["drain"])


def pool_prices(pools: list[dict[str, Any]]) -> dict[str, float]:
    """Price per GPU-hour per model from the worker's pools: the dearest pool of each model, so the
    manager never counts a model cheaper than any of its GPUs."""
    prices: dict[str, float] = {}
    for pool in pools:
        spec = pool.get("spec") or {}
        model, price = spec.get("gpuModel"), float(spec.get("pricePerGPUHour") or 0.0)
        if isinstance(model, str):
            prices[model] = max(prices.get(model, 0.0), price)
    return prices


def drain(
    name: Name,
    reason: Annotated[str, typer.Option("--reason", help="Why, for people (a maintenance ticket).")] = "",
    move_at_checkpoint: Annotated[
        bool,
        typer.Option(
            "--move-at-checkpoint",
            help="Move running work to other clusters, each job after its next checkpoint (services and "
            "work not started at once), instead of letting it finish here.",
        ),
    ] = False,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Sends no new work to the cluster; what runs there finishes, or moves (on the manager)."""
    from gpufleet.cli.control import connect

    running = "MoveAtCheckpoint" if move_at_checkpoint else "Finish"
    _set_drain(connect(server, token, state), name, {"running": running, "reason": reason})


def resume(name: Name, server: Server = None, token: Token = None, state: State = None) -> None:
    """Lets a drained cluster take new work again (on the manager)."""
    from gpufleet.cli.control import connect

    _set_drain(connect(server, token, state), name, None)


def _set_drain(client: Client, name: str, value: dict[str, str] | None) -> None:
    if value is not None:
        ClusterDrain.model_validate(value)  # refuses a bad value before anything is sent
    rtype = client.resource_type("Cluster")
    for _ in range(5):
        obj = client.read(rtype, name, None)
        spec = dict(obj.get("spec") or {})
        if spec.get("drain") == value:
            break
        spec.pop("drain", None)
        if value is not None:
            spec["drain"] = value
        body = {key: obj[key] for key in ("apiVersion", "kind", "metadata")}
        try:
            client.request("PUT", rtype.path(None, name), json={**body, "spec": spec})
        except ConflictError:  # the controller wrote its conditions meanwhile: read it again
            continue
        break
    else:
        raise ConflictError("the cluster kept changing while it was being written; try again", obj=name)
    verb = "draining: it takes no new work" if value is not None else "taking new work"
    console().print(f"cluster/{name} {verb}")


def leave(
    name: Name,
    manager: ManagerUrl,
    manager_token: ManagerToken,
    wait_seconds: Annotated[
        float, typer.Option("--wait-seconds", min=1.0, help="How long to wait for its work to move.")
    ] = 120.0,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Takes the addressed plane out of the manager's fleet, its work moved elsewhere first."""
    directory = state_dir(state)
    worker = Client(server_url(server, directory), token_of(token, directory))
    boss = Client(manager.rstrip("/"), manager_token)
    # No new work first: else the manager could send more while the worker lets go of what it has.
    _set_drain(boss, name, {"running": "Finish", "reason": "leaving the federation"})
    # The worker stops reporting and fences its managed work at once (federation.join); the manager
    # sees the fenced copies and takes them back at its next pass, to dispatch them elsewhere.
    with contextlib.suppress(NotFoundError):
        worker.request("DELETE", f"{PREFIX}/namespaces/{SYSTEM_NAMESPACE}/secrets/{MANAGER_SECRET}")
    deadline = time.monotonic() + wait_seconds
    while (held := held_in(boss, name)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if held:
        raise ConflictError(
            f"the manager still holds {', '.join(held)} there after {wait_seconds:g}s; the cluster stays "
            "(drained) in the manager: run leave again",
            obj=f"Cluster {name}",
        )
    secret, _ = token_secret(name, "")
    boss.request("DELETE", f"{PREFIX}/clusters/{name}")
    with contextlib.suppress(NotFoundError):
        boss.request("DELETE", f"{PREFIX}/namespaces/{secret.namespace}/secrets/{secret.name}")
    # Last: the manager needed its token in the worker to take the work back.
    revoke(boss, WORKER_ROLE, name)
    revoke(worker, MANAGER_ROLE, name)
    console().print(f"cluster/{name} left the manager at {boss.server}; its work runs elsewhere")


def held_in(client: Client, cluster: str) -> list[str]:
    """The unfinished jobs and services the manager holds in `cluster`."""
    held = []
    for plural in ("trainingjobs", "inferenceservices"):
        for item in client.get(f"{PREFIX}/{plural}")["items"]:
            meta = item["metadata"]
            phase = (item.get("status") or {}).get("phase")
            if meta.get("annotations", {}).get(CLUSTER) == cluster and phase not in ("Succeeded", "Failed"):
                held.append(f"{meta.get('namespace')}/{meta['name']}")
    return held
