"""The `gpufleet` command: one typer app; each area of the CLI registers its commands from its own module."""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.gpu_models import load_extra_models
from gpufleet.cli import agent, bench, control, gpu_models, kube, manifests, scenario

app = typer.Typer(
    rich_markup_mode=None,
    name="gpufleet",
    help="GPU fleet orchestration: queues, quotas, gang and topology-aware placement, GPU sharing.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for area in (bench, scenario, agent, manifests, control, kube, gpu_models):
    area.register(app)


def main() -> None:
    """Entry point: user errors print as one line and exit 2, never as a traceback."""
    # Configuration from the environment is read once, here, so every check of this process agrees.
    load_extra_models()
    try:
        # Outside standalone mode click returns a command's `typer.Exit(code)` instead of exiting.
        code = app(standalone_mode=False)
    except GpuFleetError as exc:
        Console(stderr=True, emoji=False).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # click's usage errors arrive here in standalone_mode=False
        if isinstance(exc, _click_errors()):
            usage: Any = exc  # both classes have show() and exit_code; they share no base that says so
            usage.show()
            sys.exit(usage.exit_code)
        raise
    if isinstance(code, int) and code:
        sys.exit(code)


def _click_errors() -> tuple[type[Exception], ...]:
    """The usage-error base classes in play: click's, and the copy of click that newer typer releases
    carry inside themselves (their parameter errors are not click's own class)."""
    import click

    errors: list[type[Exception]] = [click.ClickException]
    try:
        from typer._click.exceptions import ClickException as TyperClickException
    except ImportError:  # a typer that uses click itself
        pass
    else:
        errors.append(TyperClickException)
    return tuple(errors)


if __name__ == "__main__":
    main()
