"""CLI commands: `gpufleet data fetch openb` downloads public traces into the user's cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Adds the `data` group to the gpufleet app."""
    group = typer.Typer(
        rich_markup_mode=None, help="Public traces the benchmarks run on.", no_args_is_help=True
    )
    group.command("fetch")(fetch)
    app.add_typer(group, name="data")


def fetch(
    name: Annotated[str, typer.Argument(help="The dataset: openb (Alibaba cluster-trace-gpu-v2023).")],
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest", help="Data directory to put it in [default: $XDG_CACHE_HOME/gpufleet/data, ~/.cache]."
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="Serve the files from this mirror of raw.githubusercontent.com."),
    ] = None,
) -> None:
    """Downloads a dataset from its public repository, checks every file's SHA-256, and keeps it in the
    user's cache, where `gpufleet bench fgd` finds it. Files already there are not downloaded again."""
    from rich.console import Console

    from gpufleet.sim import download
    from gpufleet.sim.datasets import cache_dir

    data = download.dataset(name)
    out = Console(highlight=False, soft_wrap=True, emoji=False)
    source = base_url or download.DEFAULT_BASE_URL
    out.print(f"{data.description}\n  from {data.url(source, '')} (commit {data.commit[:12]})")

    def report(item: download.Fetched) -> None:
        what = "fetched" if item.downloaded else "cached "
        out.print(f"  {what} {item.path.name} ({item.size / 1e6:.1f} MB, SHA-256 checked)")

    files = download.fetch(data, dest=dest, base_url=source, progress=report)
    where = (dest if dest is not None else cache_dir()) / data.target
    out.print(f"{len(files)} files in {where}")
