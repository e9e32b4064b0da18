"""`gpufleet gpu-models`: the GPU model names a fleet definition may use."""

from __future__ import annotations

import typer

from gpufleet.api import gpu_models


def list_models() -> None:
    """Lists the known GPU models and their aliases (add more with GPUFLEET_GPU_MODELS=A,B)."""
    added = set(gpu_models.added_models())
    for name, aliases in gpu_models.catalogue().items():
        note = f"  (from {gpu_models.EXTRA_MODELS_ENV})" if name in added else ""
        typer.echo(f"{name}: {', '.join(aliases)}" if aliases else f"{name}{note}")


def register(app: typer.Typer) -> None:
    app.command("gpu-models")(list_models)
