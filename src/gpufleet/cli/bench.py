"""CLI commands: bench."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
