"""CLI command: gpufleet bench throughput."""

from __future__ import annotations

import typer


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
