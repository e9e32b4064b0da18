"""`gpufleet bench kube` at a smoke size, against the in-memory API server served over HTTP: the real
client, a real `gpufleet kube scheduler` process, and everything the run made deleted at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app

from .fake_http import serve, write_kubeconfig
from .fakeapi import FakeApiServer


@pytest.mark.parametrize(("pods", "gang"), [(12, 1), (8, 4)])
def test_the_bench_binds_every_pod_and_leaves_nothing(tmp_path: Path, pods: int, gang: int) -> None:
    api = FakeApiServer()
    server = serve(api)
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, server.server_address[1])
    try:
        args = ["bench", "kube", "--kubeconfig", str(config), "--nodes", "4", "--pods", str(pods)]
        args += ["--gang-size", str(gang), "--gpus-per-pod", "2", "--json", "--timeout", "120"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        assert figures["bound"] == pods and figures["pods"] == pods and figures["gang_size"] == gang
        assert figures["pods_per_s"] > 0 and figures["first_bind_s"] >= 0
        assert figures["scheduler_cpu_s"] is not None and figures["scheduler_peak_rss_mib"] > 0
        left = {
            key: names for key, names in api.objects.items() if key in ("/v1/pods", "/v1/nodes") and names
        }
        assert left == {}
    finally:
        server.shutdown()


def test_pods_that_do_not_fit_are_refused_before_anything_is_made(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, 9)
    args = ["bench", "kube", "--kubeconfig", str(config), "--nodes", "1", "--pods", "9"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "do not fit" in str(result.exception or result.output)
