"""CLI command: gpufleet bench api — the embedded API under many watches and busy writers."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli.output import print_figures


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("api")(api)


def api(
    watchers: Annotated[int, typer.Option(min=0, help="Clients that each hold a watch open.")] = 256,
    writers: Annotated[
        int, typer.Option(min=1, help="Clients that each create objects, one at a time.")
    ] = 32,
    seconds: Annotated[float, typer.Option(min=0.1, help="How long the writers write.")] = 60.0,
    scope: Annotated[
        str,
        typer.Option(
            help="What each watch follows: one writer's namespace, or all namespaces (every write)."
        ),
    ] = "namespace",
    grace: Annotated[
        float,
        typer.Option(min=0, help="Seconds the watches get after the writes to deliver the last events."),
    ] = 30.0,
    keep: Annotated[bool, typer.Option("--keep", help="Leave the ModelVersions the run made.")] = False,
    server: Annotated[
        str | None, typer.Option("--server", help="URL of the server [env GPUFLEET_SERVER; the state's].")
    ] = None,
    token: Annotated[
        str | None, typer.Option("--token", help="The admin token [env GPUFLEET_TOKEN; the state's].")
    ] = None,
    state: Annotated[
        str | None,
        typer.Option("--state", help="State directory [env GPUFLEET_STATE; ~/.local/share/gpufleet]."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Create latency, /healthz latency, creates/s and missed watch events of a running `gpufleet up`."""
    from gpufleet.api.errors import ValidationError
    from gpufleet.cli import client
    from gpufleet.server.bench import ApiBench

    if scope not in ("namespace", "all"):
        raise ValidationError(f"must be namespace or all, not {scope!r}", field="--scope")
    directory = client.state_dir(state)
    url = client.server_url(server, directory)
    err = Console(stderr=True)
    run = ApiBench(
        url, client.token(token, directory), watchers=watchers, writers=writers, seconds=seconds,
        scope="all" if scope == "all" else "namespace", grace=grace, keep=keep,
        progress=lambda line: err.print(line, highlight=False),
    )  # fmt: skip
    result = run.measure()
    targets = {
        f"target {target}": "met" if met else "NOT met" for target, met in result.targets_met().items()
    }
    title = f"The API of {url} under {watchers} watches and {writers} writers"
    print_figures(title, result.to_dict(), as_json=as_json, extra=targets)
