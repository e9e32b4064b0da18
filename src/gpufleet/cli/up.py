"""`gpufleet up`: the embedded control plane in one process, in the foreground until Ctrl-C.

It opens the state directory's store, applies the fleet file (and, with `--demo`, the built-in demo
fleet), starts the runtime (digital-twin nodes and the controllers) and serves the HTTP API. The
state survives restarts: running `up` again continues where it stopped.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

import gpufleet.controllers.admission  # noqa: F401 - registers the MIG-layout admission check the API runs
from gpufleet.api.documents import load_objects
from gpufleet.api.errors import ValidationError
from gpufleet.api.resource import Resource
from gpufleet.cli import up_clusters
from gpufleet.cli.client import DEFAULT_SERVER, state_dir
from gpufleet.cli.federation_http import joined_worker
from gpufleet.cli.output import console
from gpufleet.cli.placement import PLACEMENT_CLASS_HELP, PLACEMENT_HELP, scheduler_config
from gpufleet.cli.timescale import clock_for
from gpufleet.controllers.plane import build_manager
from gpufleet.observability import metrics, tracing
from gpufleet.observability.logs import setup_logging
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.server.app import FaultRequest, create_app
from gpufleet.server.auth import Principal, TokenRegistry
from gpufleet.server.console import add_console
from gpufleet.server.metrics import add_metrics_route
from gpufleet.server.nodestate import NodeStateCollector
from gpufleet.server.operations import Operations
from gpufleet.server.serve import DEFAULT_HOST, DEFAULT_PORT, ApiServer, ServerError
from gpufleet.server.statelock import StateLock
from gpufleet.store import SqliteStore
from gpufleet.store.console import StoreSource
from gpufleet.store.permissions import make_private
from gpufleet.twin import twin as twin_faults
from gpufleet.twin.clock import Clock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

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
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", help="Seconds of fleet time per real second (60: a minute a second)."),
    ] = 1.0,
    runtime: Annotated[
        bool, typer.Option("--runtime/--no-runtime", help="Run the digital twin and the controllers.")
    ] = True,
    placement: Annotated[str | None, typer.Option("--placement", help=PLACEMENT_HELP)] = None,
    placement_class: Annotated[
        list[str] | None, typer.Option("--placement-class", help=PLACEMENT_CLASS_HELP)
    ] = None,
    log_format: Annotated[
        str, typer.Option("--log-format", help="text (for a terminal) or json (one object a line).")
    ] = "text",
    otlp_endpoint: Annotated[str | None, typer.Option("--otlp-endpoint", help=tracing.OTLP_HELP)] = None,
    clusters: Annotated[
        int,
        typer.Option(
            "--clusters",
            help="Run a management plane over this many embedded worker planes (federation); 0: one plane.",
            min=0,
            max=16,
        ),
    ] = 0,
    manager: Annotated[
        bool,
        typer.Option(
            "--manager",
            help="Run a management plane (federation) that workers join with `gpufleet cluster join`; "
            "with --clusters N it also runs N workers of its own.",
        ),
    ] = False,
    lease_grace: Annotated[
        float,
        typer.Option(
            "--lease-grace",
            min=0.0,
            help="Manager: seconds past a worker's lease before its work moves; it must cover the clock "
            "skew between the machines and a heartbeat in flight.",
        ),
    ] = up_clusters.GRACE_SECONDS,
) -> None:
    """Runs the control plane: the API, the digital-twin nodes and the controllers."""
    setup_logging(log_format, level=logging.WARNING)
    tracing.configure(service="gpufleet-up", endpoint=otlp_endpoint)
    out = console()
    # Everything that can be refused is checked before the state directory is created or changed.
    config = scheduler_config(placement, placement_class)
    objects = (demo_objects() if demo else []) + [obj for path in fleet or [] for obj in load_objects(path)]
    check_port(host, port)
    directory = state_dir(state)
    prepare_state(directory)
    # Held until the process ends: a second `up` on this directory fails here, before it touches
    # the store, the clock file or `server.url`.
    with StateLock(directory):
        if clusters or manager:
            if not runtime:
                flag = "--clusters" if clusters else "--manager"
                raise ValidationError(f"{flag} needs the runtime (drop --no-runtime)", field=flag)
            up_clusters.serve(
                directory,
                objects,
                out,
                host=host,
                port=port,
                time_scale=time_scale,
                config=config,
                clusters=clusters,
                grace_seconds=lease_grace,
            )
        else:
            _serve(directory, objects, out, state is not None, host, port, time_scale, runtime, config)
    out.print("stopped; the state is kept in " + str(directory))


def check_port(host: str, port: int) -> None:
    """Refuses a port that cannot be listened on (taken, privileged, a host not of this machine) before
    the state directory is touched; the server binds its own socket later (port 0: any free one)."""
    if port == 0:
        return
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's socket
    try:
        probe.bind((host, port))
    except OSError as exc:
        raise ServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--port") from None
    finally:
        probe.close()


def prepare_state(directory: Path) -> None:
    """Creates the state directory (private to its owner) and checks it can be written, or says why not."""
    try:
        make_private(directory)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if directory.exists() and not directory.is_dir():
            reason = "it is a file, not a directory"
        raise ValidationError(
            f"cannot use {directory} as the state directory: {reason}", field="--state"
        ) from None


def _serve(
    directory: Path,
    objects: list[Resource],
    out: Console,
    state_given: bool,
    host: str,
    port: int,
    time_scale: float,
    runtime: bool,
    config: SchedulerConfig,
) -> None:
    clock = clock_for(directory, time_scale)
    metrics.use_clock(clock.now)  # checkpoint ages are taken on it (GpufleetCheckpointOverdue)
    with SqliteStore.open(directory, clock=clock.datetime) as store:
        tokens = TokenRegistry(directory, now=clock.datetime)
        twin = Twin(store, clock=clock) if runtime else None
        app = create_app(
            store,
            tokens,
            faults=None if twin is None else _fault_sink(twin),
            logs=None if twin is None else twin.logs,
            now=clock.datetime,
        )
        add_metrics_route(app, tokens, [NodeStateCollector(store)])
        add_console(app, StoreSource(store), tokens, now=clock.datetime)
        server = ApiServer(app, state_dir=directory, host=host, port=port)
        server.bind()  # a port in use fails here, before anything is changed
        if objects:
            with out.status(f"applying {len(objects)} objects", spinner="dots"):
                applied = Operations(store).apply(_ADMIN, objects)
            changed = sum(1 for a in applied if a.action != "unchanged")
            out.print(f"[green]✓[/] fleet: {len(applied)} objects ({changed} created or changed)")
        stop = threading.Event()
        thread = _start_runtime(store, clock, twin, stop, config) if twin is not None else None
        _banner(
            out,
            server.url,
            directory,
            tokens.admin_token_path,
            state_given,
            time_scale,
            thread is not None,
        )
        try:
            server.run()
        finally:
            stop.set()
            if thread is not None:
                thread.join(timeout=10)


def _start_runtime(
    store: SqliteStore, clock: Clock, twin: Twin, stop: threading.Event, config: SchedulerConfig
) -> threading.Thread:
    """The twin and the controllers on one driver, in a background thread; the plane becomes a
    federation worker once `gpufleet cluster join` names its manager (`federation.join`)."""
    controllers = build_manager(store, config=config)
    worker = joined_worker(store, controllers, heartbeat_seconds=up_clusters.HEARTBEAT_SECONDS)
    runtime = Runtime(store, clock=clock, participants=[twin, controllers, worker])
    return runtime.start(stop)


def _fault_sink(twin: Twin) -> Callable[[FaultRequest], None]:
    def inject(request: FaultRequest) -> None:
        fault: twin_faults.Fault
        if request.type == "GpuFailure":
            fault = twin_faults.GpuFailure(request.node, request.gpu or 0)
        elif request.type == "GpuRepair":
            fault = twin_faults.GpuRepair(request.node, request.gpu or 0)
        elif request.type == "NodeLoss":
            fault = twin_faults.NodeLoss(request.node)
        else:
            fault = twin_faults.SpotInterruption(request.node)
        twin.inject(fault)

    return inject


def _banner(
    out: Console, url: str, directory: Path, token_path: Path, state_given: bool, scale: float, runtime: bool
) -> None:
    out.print(f"[bold green]gpufleet is up[/] at [bold]{url}[/]")
    if runtime:
        speed = "real time" if scale == 1 else f"{scale:g}x real time"
        out.print(f"  runtime      digital twin and controllers, {speed}")
    else:
        out.print("  runtime      off (--no-runtime): the API and the store only")
    out.print(f"  console      {url}/   (sign in with the admin token or a queue's token)")
    out.print(f"  API docs     {url}/docs   (OpenAPI: {url}/openapi.json)")
    out.print(f"  state        {directory}")
    out.print(f"  admin token  {token_path}")
    env = []
    if url != DEFAULT_SERVER:
        env.append(f"GPUFLEET_SERVER={url}")
    if state_given:
        env.append(f"GPUFLEET_STATE={directory}")
    setup, command = how_to_run()
    out.print("\nTry, in another terminal:")
    for line in setup:
        out.print(f"  {escape(line):<46} [dim]puts gpufleet on PATH[/]")
    if env:
        out.print(f"  export {' '.join(env)}")
    for args, why in (
        ("get pools", "the GPU pools and their nodes"),
        ("get tj -A", "training jobs of every namespace"),
        ("describe tj moe-ablation -n team-b", "why a job is pending"),
        ("top", "GPU use per pool and queue"),
        ("events -w", "what happens, as it happens"),
        ("token create --queue team-a", "a token that only sees team-a"),
        ("fault gpu-failure NODE --gpu 0", "fail a GPU; its job restarts from a checkpoint"),
    ):
        line = f"{command} {args}"
        out.print(f"  [cyan]{escape(line):<46}[/] [dim]{why}[/]")
    out.print("\nCtrl-C stops it.")


def how_to_run() -> tuple[list[str], str]:
    """How a shell here runs this installation's `gpufleet`: (lines to run first, the command).

    `gpufleet` itself when the PATH finds this installation's script; else, in a virtual environment,
    the line that activates it; else the script's path, or the interpreter with `-m` when there is no
    script. Paths are absolute: the other terminal may be anywhere.
    """
    bin_dir = Path(sys.executable).parent  # not resolved: a venv's python is a link out of it
    script = bin_dir / "gpufleet"
    if not script.is_file():
        return [], f"{shlex.quote(sys.executable)} -m gpufleet.cli.main"
    found = shutil.which("gpufleet")
    if found is not None and Path(found).resolve() == script.resolve():
        return [], "gpufleet"
    activate = bin_dir / "activate"
    if sys.prefix != sys.base_prefix and activate.is_file():
        return [f". {shlex.quote(str(activate.absolute()))}"], "gpufleet"
    return [], shlex.quote(str(script.absolute()))
