"""CLI commands: `gpufleet manifests ...` prints what Kubernetes needs to run gpufleet's kinds."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.errors import ValidationError
from gpufleet.kube.manifests import render_all, values_from

manifests_app = typer.Typer(
    rich_markup_mode=None,
    help="Kubernetes manifests generated from gpufleet's API kinds.",
    no_args_is_help=True,
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


@manifests_app.command("all")
def all_manifests(
    values: Path | None = typer.Option(None, "--values", "-f", help="A values file, as for the Helm chart."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Everything gpufleet runs in a cluster (what the Helm chart renders), for `kubectl apply -f`."""
    overrides = None
    if values is not None:
        try:
            overrides = yaml.safe_load(values.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValidationError(f"cannot read: {exc.strerror}", obj=str(values)) from None
        except yaml.YAMLError as exc:
            raise ValidationError(f"not valid YAML: {exc}", obj=str(values)) from None
    objects = render_all(values_from(overrides, source=str(values or "values")))
    text = yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
    app.add_typer(manifests_app, name="manifests")
