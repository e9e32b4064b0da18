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


def test_a_scheduler_already_serving_the_name_is_reported_not_measured() -> None:
    import subprocess
    import sys
    import threading

    from gpufleet.api.errors import ConflictError
    from gpufleet.kube.bench import KubeBench
    from gpufleet.kube.config import KubeConfig
    from gpufleet.kube.scheduler import KubeScheduler

    api = FakeApiServer()
    stale = KubeScheduler(api, config=KubeConfig(scheduler_name="gpufleet"), period=0.2)
    stop = threading.Event()
    stale.informers.start(stop)
    thread = threading.Thread(target=stale.run, args=(stop,), daemon=True)
    thread.start()
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen([sys.executable, "-c", "pass"]))
        return started[-1]

    bench = KubeBench(api, nodes=2, pods=4)
    try:
        # The stale scheduler binds the pods while they are being created, before the measured one.
        real_create = bench.create_pods

        def create_then_wait(progress=lambda _: None) -> None:  # type: ignore[no-untyped-def]
            real_create(progress)
            for _ in range(300):  # a loaded machine may take seconds
                if any(p["spec"].get("nodeName") for p in api.objects.get("/v1/pods", {}).values()):
                    return
                stop.wait(0.1)

        bench.create_pods = create_then_wait  # type: ignore[method-assign]
        with pytest.raises(ConflictError, match="another scheduler serves schedulerName 'gpufleet'"):
            bench.measure(start=start, timeout=10)
        assert started == []  # nothing was started, nothing measured
        assert not api.objects.get("/v1/pods") and not api.objects.get("/v1/nodes")
    finally:
        stop.set()
        thread.join(10)
