"""`gpufleet kube console`: the web console of a Kubernetes cluster, served from the user's machine.

It reads the cluster through the API server with the user's kubeconfig (what `kubectl` may read, it
shows), kept current by informers (list, then watch), and serves the same page and JSON as
`gpufleet up` does at `/`, on a loopback port by default. The page's token is made at each start,
kept in a private temporary directory that goes with the process, and given in the printed URL
(`#token=...`, which never reaches the server). Queue tokens (`gpufleet kube token create --queue Q`)
are kept as digests in a Secret (`kube.console_tokens`) and read again every few seconds; each sees
its queue, its jobs and services, their costs and the Events about them, as in the embedded console.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import typer

from gpufleet.cli.kube import CONTEXT, KUBECONFIG, ClusterError, _cluster_error, _transport
from gpufleet.kube.transport import ApiError

NAMESPACE = typer.Option(
    "gpufleet-system", "--namespace", help="Namespace of the queue tokens' Secret (the operator's)."
)


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
    namespace: str = NAMESPACE,
    tokens_dir: Path | None = typer.Option(
        None,
        "--tokens-dir",
        metavar="DIR",
        help="Read queue tokens from this directory (the token Secret mounted as a volume) instead of "
        "the Secret through the API server.",
    ),
) -> None:
    """Serves the web console of the cluster: fleet map, queues, work, events and cost. Besides the
    admin token in the printed URL, it takes queue tokens (`gpufleet kube token create`), each of
    which sees its queue only."""
    from gpufleet.kube import console_tokens
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.console import KubeConsoleSource
    from gpufleet.kube.console_events import KubeEvents
    from gpufleet.server.auth import ScopedTokens, TokenRegistry
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
        registry = TokenRegistry(state)
        if tokens_dir is not None:
            where = tokens_dir
            tokens = ScopedTokens(registry, lambda: console_tokens.read_dir(where))
        else:
            tokens = ScopedTokens(registry, lambda: console_tokens.read_secret(api, namespace))
        app = console_app(source, tokens, KubeEvents(api))
        server = ApiServer(app, state_dir=state, host=host, port=port)
        server.bind()  # a port in use fails here, before the URL is printed
        typer.echo(f"gpufleet console: {server.url}/#token={registry.admin_token}")
        typer.echo("(Ctrl-C stops it)")
        try:
            server.run()
        finally:
            stop.set()  # the informers' watches end with the server


def token_create(
    queue: str = typer.Option(..., "--queue", "-q", metavar="QUEUE", help="The queue the token may read."),
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str = NAMESPACE,
) -> None:
    """Makes a console token scoped to one queue and prints it (only its digest is kept, in the Secret
    gpufleet-console-tokens; remove its key there to revoke it)."""
    from gpufleet.kube import console_tokens
    from gpufleet.server.auth import new_token, token_digest

    api = _transport(kubeconfig, context)
    token = new_token()
    try:
        console_tokens.add_token(api, namespace, token_digest(token), queue)
    except ApiError as exc:
        raise _cluster_error(exc, f"write the Secret {namespace}/{console_tokens.SECRET_NAME}") from None
    typer.echo(token)


def register(app: typer.Typer) -> None:
    app.command("console")(console)
    tokens = typer.Typer(rich_markup_mode=None, help="Queue tokens of the console.", no_args_is_help=True)
    tokens.command("create")(token_create)
    app.add_typer(tokens, name="token")
