"""Smoke run of `gpufleet bench api` against a server in this process: every key, no error, no miss."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpufleet.api.errors import ValidationError
from gpufleet.cli.main import app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.bench import check_loopback, percentile
from gpufleet.server.serve import ApiServer
from gpufleet.store import SqliteStore

KEYS = {
    "watchers", "writers", "seconds", "scope", "creates", "creates_per_s", "p50_create_ms",
    "p99_create_ms", "p99_healthz_ms", "healthz_checks", "errors", "missed_events",
    "events_delivered", "server_rss_mib", "server_peak_rss_mib", "first_error", "targets_met",
}  # fmt: skip


@pytest.mark.parametrize(("scope", "seconds"), [("namespace", "3"), ("all", "1")])
def test_a_small_run_reports_every_figure_and_misses_nothing(
    live_server: ApiServer, tokens: TokenRegistry, store: SqliteStore, scope: str, seconds: str
) -> None:
    args = ["bench", "api", "--server", live_server.url, "--token", tokens.admin_token]
    args += ["--watchers", "8", "--writers", "4", "--seconds", seconds, "--scope", scope, "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(row) == KEYS
    assert row["errors"] == 0, row["first_error"]
    assert row["missed_events"] == 0
    assert row["creates"] > 0 and row["healthz_checks"] > 0 and row["server_rss_mib"] > 0
    # Each namespace is watched by two of the eight watchers; each watcher of all sees every create.
    assert row["events_delivered"] == row["creates"] * (2 if scope == "namespace" else 8)
    assert store.list("ModelVersion").items == []  # the run deleted what it made


def test_the_table_names_each_target(live_server: ApiServer, tokens: TokenRegistry) -> None:
    args = ["bench", "api", "--server", live_server.url, "--token", tokens.admin_token]
    out = CliRunner().invoke(app, [*args, "--watchers", "2", "--writers", "1", "--seconds", "0.5"])
    assert out.exit_code == 0, out.output
    assert "p99_create_ms" in out.stdout and "target creates_per_s >= 500" in out.stdout


def test_only_a_loopback_server_is_loaded() -> None:
    for url in ("http://127.0.0.1:8765", "http://localhost:1", "http://[::1]:80"):
        check_loopback(url)
    for url in ("http://10.0.0.1:8765", "http://example.com", "http://0.0.0.0:1"):
        with pytest.raises(ValidationError, match="not a loopback address"):
            check_loopback(url)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) is None
