"""CLI commands: `gpufleet scenario run FILE|DIR... [--json]`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    """Adds the `scenario` group to the gpufleet app."""
    group = typer.Typer(
        rich_markup_mode=None, help="Scheduler what-ifs: run scenario files and check their expectations."
    )
    group.command("run")(run)
    app.add_typer(group, name="scenario")


def run(
    paths: Annotated[list[str], typer.Argument(help="Scenario files or directories of them.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per scenario.")] = False,
) -> None:
    """Runs every scenario to a fixed point and checks its expectations; exit 1 if any fails.

    Every file is loaded and checked before the first scenario runs.
    """
    from gpufleet.sim.scenario import load_scenarios, run_scenario

    loaded = load_scenarios(paths)
    console = Console(highlight=False, soft_wrap=True, emoji=False)
    failed = 0
    for item in loaded:
        outcome = run_scenario(item)
        failed += not outcome.passed
        if as_json:
            print(json.dumps(outcome.to_dict()))
            continue
        mark = "[green]PASS[/]" if outcome.passed else "[bold red]FAIL[/]"
        console.print(f"{mark} {outcome.name} ({outcome.source}, {outcome.cycles} cycles)")
        for failure in outcome.failures:
            console.print(f"     {failure}")
    if not as_json:
        console.print(f"{len(loaded) - failed}/{len(loaded)} scenarios passed")
    if failed:
        raise typer.Exit(1)
