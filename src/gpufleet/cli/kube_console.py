"""`gpufleet kube console`: the web console of a Kubernetes cluster, served from the user's machine.

It reads the cluster through the API server with the user's kubeconfig (what `kubectl` may read, it
shows), kept current by informers (list, then watch), and serves the same page and JSON as
`gpufleet up` does at `/`, on a loopback port by default. The page's token is made at each start,
kept in a private temporary directory that goes with the process, and given in the printed URL
(`#token=...`, which never reaches the server).
"""

from __future__ import annotations

import tempfile
import threading

import typer

from gpufleet.cli.kube import CONTEXT, KUBECONFIG, ClusterError, _cluster_error, _transport
from gpufleet.kube.transport import ApiError


def console(
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback: this machine only)."),
    port: int = typer.Option(8766, help="Port to listen on (0: any free one)."),
    name: str = typer.Option(
        "gpufleet",
        "--scheduler-name",
        help="The scheduler's name: its waiting pods are shown with their reasons.",
    ),
) -> None:
    """Serves the web console of the cluster: fleet map, queues, work, events and cost."""
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.console import KubeConsoleSource
    from gpufleet.kube.console_events import KubeEvents
    from gpufleet.server.auth import TokenRegistry
    from gpufleet.server.console.standalone import console_app
    from gpufleet.server.serve import ApiServer

    api = _transport(kubeconfig, context)
    source = KubeConsoleSource(api, KubeConfig(scheduler_name=name))
    try:
        source.resources("Queue")  # the cluster answers and serves gpufleet's kinds, or it is said now
    except ApiError as exc:
        if exc.status == 404:
            raise ClusterError(
                "the cluster does not serve gpufleet's kinds: install them with `gpufleet kube install-crds`"
            ) from None
        raise _cluster_error(exc, "read the cluster's Queues") from None
    stop = threading.Event()
    if not source.watch(stop):
        stop.set()
        raise ClusterError(
            "the cluster's Nodes, Pods and gpufleet objects could not be listed within a minute"
        )
    with tempfile.TemporaryDirectory(prefix="gpufleet-console-") as state:
        tokens = TokenRegistry(state)
        app = console_app(source, tokens, KubeEvents(api))
        server = ApiServer(app, state_dir=state, host=host, port=port)
        server.bind()  # a port in use fails here, before the URL is printed
        typer.echo(f"gpufleet console: {server.url}/#token={tokens.admin_token}")
        typer.echo("(Ctrl-C stops it)")
        try:
            server.run()
        finally:
            stop.set()  # the informers' watches end with the server


def register(app: typer.Typer) -> None:
    app.command("console")(console)
