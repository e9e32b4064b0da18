"""CLI commands: `gpufleet manifests ...` prints what Kubernetes needs to run gpufleet's kinds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.documents import load_yaml
from gpufleet.api.errors import ValidationError
from gpufleet.kube.manifests import render_all, values_from

manifests_app = typer.Typer(
    rich_markup_mode=None,
    help="Kubernetes manifests generated from gpufleet's API kinds.",
    no_args_is_help=True,
)


FORMAT = typer.Option("yaml", "--output", "-o", metavar="FORMAT", help="yaml or json.")
TO_FILE = typer.Option(None, "--output-file", metavar="PATH", help="Write to this file instead of stdout.")


def _write(objects: list[dict[str, Any]], output: str, to_file: Path | None) -> None:
    """The objects as YAML documents or a JSON List, on stdout or into a file."""
    if output == "yaml":
        text = yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)
    elif output == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    else:
        raise ValidationError(f"must be yaml or json, got {output!r}", field="--output")
    if to_file is None:
        typer.echo(text, nl=False)
    else:
        to_file.write_text(text, encoding="utf-8")


@manifests_app.command("crds")
def crds(output: str = FORMAT, to_file: Path | None = TO_FILE) -> None:
    """CustomResourceDefinitions of gpufleet's kinds, for `kubectl apply -f`."""
    _write(custom_resource_definitions(), output, to_file)


@manifests_app.command("all")
def all_manifests(
    values: Path | None = typer.Option(
        None, "--values", "-f", metavar="FILE", help="A values file, as for the Helm chart."
    ),
    output: str = FORMAT,
    to_file: Path | None = TO_FILE,
) -> None:
    """Everything gpufleet runs in a cluster (what the Helm chart renders), for `kubectl apply -f`."""
    overrides = None
    if values is not None:
        try:
            text = values.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValidationError(f"cannot read: {exc.strerror}", obj=str(values)) from None
        overrides = load_yaml(text, str(values))
    if output not in ("yaml", "json"):  # before the values are read
        raise ValidationError(f"must be yaml or json, got {output!r}", field="--output")
    _write(render_all(values_from(overrides, source=str(values or "values"))), output, to_file)


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
    app.add_typer(manifests_app, name="manifests")
