"""CLI commands: `gpufleet manifests ...` prints what Kubernetes needs to run gpufleet's kinds."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from gpufleet.api.crd import custom_resource_definitions

manifests_app = typer.Typer(
    help="Kubernetes manifests generated from gpufleet's API kinds.", no_args_is_help=True
)


@manifests_app.command("crds")
def crds(
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """CustomResourceDefinitions of gpufleet's kinds, for `kubectl apply -f`."""
    text = yaml.safe_dump_all(custom_resource_definitions(), sort_keys=False, explicit_start=True)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
    app.add_typer(manifests_app, name="manifests")
