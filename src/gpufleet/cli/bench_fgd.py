"""CLI command: gpufleet bench fgd."""

from __future__ import annotations

import typer


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
