"""`gpufleet up`: the embedded control plane in one process, in the foreground until Ctrl-C.

It opens the state directory's store, applies the fleet file (and, with `--demo`, the built-in demo
fleet), starts the runtime (digital-twin nodes and the controllers) and serves the HTTP API. The
state survives restarts: running `up` again continues where it stopped.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.api.documents import load_objects
from gpufleet.api.resource import Resource
from gpufleet.cli.client import DEFAULT_SERVER, state_dir
from gpufleet.cli.output import console
from gpufleet.server.app import create_app
from gpufleet.server.auth import Principal, TokenRegistry
from gpufleet.server.operations import Operations
from gpufleet.server.serve import DEFAULT_HOST, DEFAULT_PORT, ApiServer
from gpufleet.store import SqliteStore

DEMO_FLEET = "demo_fleet.yaml"
_ADMIN = Principal(queue=None, token_id="gpufleet-up")


def register(app: typer.Typer) -> None:
    app.command("up")(up)


def demo_objects() -> list[Resource]:
    """The built-in demo fleet: pools, queues, jobs and services."""
    text = resources.files("gpufleet.cli").joinpath(DEMO_FLEET).read_text(encoding="utf-8")
    return load_objects(text)


def up(
    fleet: Annotated[
        list[Path] | None,
        typer.Option("--fleet", "-f", help="YAML of pools, queues, jobs... to apply at start."),
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Start with the built-in demo fleet.")] = False,
    state: Annotated[
        str | None,
        typer.Option("--state", help="State directory [env GPUFLEET_STATE; ~/.local/share/gpufleet]."),
    ] = None,
    port: Annotated[
        int, typer.Option("--port", help="Port of the API (0: any free one).", min=0, max=65535)
    ] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = DEFAULT_HOST,
) -> None:
    """Runs the control plane: the API, the digital-twin nodes and the controllers."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = console()
    directory = state_dir(state)
    objects = (demo_objects() if demo else []) + [obj for path in fleet or [] for obj in load_objects(path)]
    with SqliteStore.open(directory) as store:
        tokens = TokenRegistry(directory)
        server = ApiServer(create_app(store, tokens), state_dir=directory, host=host, port=port)
        server.bind()  # a port in use fails here, before anything is changed
        if objects:
            with out.status(f"applying {len(objects)} objects", spinner="dots"):
                applied = Operations(store).apply(_ADMIN, objects)
            changed = sum(1 for a in applied if a.action != "unchanged")
            out.print(f"[green]✓[/] fleet: {len(applied)} objects ({changed} created or changed)")
        _banner(out, server.url, directory, tokens.admin_token_path, state is not None)
        server.run()
    out.print("stopped; the state is kept in " + str(directory))


def _banner(out: Console, url: str, directory: Path, token_path: Path, state_given: bool) -> None:
    out.print(f"[bold green]gpufleet is up[/] at [bold]{url}[/]")
    out.print(f"  API docs     {url}/docs   (OpenAPI: {url}/openapi.json)")
    out.print(f"  state        {directory}")
    out.print(f"  admin token  {token_path}")
    env = []
    if url != DEFAULT_SERVER:
        env.append(f"GPUFLEET_SERVER={url}")
    if state_given:
        env.append(f"GPUFLEET_STATE={directory}")
    out.print("\nTry, in another terminal:")
    if env:
        out.print(f"  export {' '.join(env)}")
    for command, why in (
        ("gpufleet get pools", "the GPU pools and their nodes"),
        ("gpufleet get tj -A", "training jobs of every namespace"),
        ("gpufleet describe tj moe-ablation -n team-b", "why a job is pending"),
        ("gpufleet top", "GPU use per pool and queue"),
        ("gpufleet events -w", "what happens, as it happens"),
        ("gpufleet token create --queue team-a", "a token that only sees team-a"),
    ):
        out.print(f"  [cyan]{command:<44}[/] [dim]{why}[/]")
    out.print("\nCtrl-C stops it.")
