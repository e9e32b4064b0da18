"""CLI commands: `gpufleet bench ...`; each benchmark defines its command in its own module."""

from __future__ import annotations

import typer

from gpufleet.cli import (
    bench_admission,
    bench_api,
    bench_federation,
    bench_fgd,
    bench_kube,
    bench_throughput,
)


def register(app: typer.Typer) -> None:
    """Adds the `bench` group to the gpufleet app."""
    bench = typer.Typer(
        rich_markup_mode=None, help="Benchmarks: placement quality on real traces and scheduler throughput."
    )
    bench_fgd.register(bench)
    bench_throughput.register(bench)
    bench_admission.register(bench)
    bench_kube.register(bench)
    bench_api.register(bench)
    bench_federation.register(bench)
    app.add_typer(bench, name="bench")
