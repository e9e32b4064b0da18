"""The DCGM-style exporter: series, pod attribution, promtool's verdict, a real Prometheus scraping it."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.agent.exporter import DEFAULT_COUNTERS, DcgmCollector, MetricsServer, PodResourcesClient, render
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import RealNvml, RecordedNvml

from .fakes import FakePodResources, FakePynvml

_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name as written (prometheus_client's parser would rename counters to `<name>_total`)."""
    list(text_string_to_metric_families(text))  # the text must parse
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = _SAMPLE.match(line)
        assert match, line
        name, labels, value = match.groups()
        out.setdefault(name, []).append((dict(_LABEL.findall(labels or "")), float(value)))
    return out


def test_default_counters_with_dcgm_labels(h100: RecordedNvml) -> None:
    node = h100.discover()
    health = HealthState()
    health.record_xid(node.gpus[1].uuid, 79)
    text = render([DcgmCollector(h100, node, hostname="node-a", health=health)]).decode()

    # Every counter keeps dcgm-exporter's exact name and type: no `_total` added to counters.
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "_total" not in text
    series = _families(text)
    assert set(series) == {c.name for c in DEFAULT_COUNTERS} - {"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}
    temps = series["DCGM_FI_DEV_GPU_TEMP"]
    assert len(temps) == 8
    labels, value = temps[0]
    gpu = node.gpus[0]
    assert labels == {
        "gpu": "0",
        "UUID": gpu.uuid,
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
    }
    assert value == h100.telemetry(gpu.uuid).gpu_temp_c
    assert [v for _, v in series["DCGM_FI_DEV_XID_ERRORS"]] == [0, 79, 0, 0, 0, 0, 0, 0]
    assert series["DCGM_FI_DEV_POWER_USAGE"][0][1] == pytest.approx(610.5)


def test_vgpu_license_status_is_exported_where_nvml_reports_it(h100: RecordedNvml) -> None:
    node = h100.discover()
    licensed = node.gpus[2].uuid
    fake = FakePynvml(node, {licensed: replace(h100.telemetry(licensed), vgpu_license_status=1.0)})
    fake.virtualization[2] = pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU
    backend = RealNvml(fake)
    series = _families(render([DcgmCollector(backend, backend.discover(), hostname="vm-a")]).decode())
    # Only the vGPU has a licence to report; on the others NVML says licensing is not supported.
    assert [(labels["UUID"], value) for labels, value in series["DCGM_FI_DEV_VGPU_LICENSE_STATUS"]] == [
        (licensed, 1.0)
    ]


def test_mig_devices_carry_gpu_instance_labels(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    series = _families(render([DcgmCollector(a100_mig, node, hostname="n")]).decode())
    used = series["DCGM_FI_DEV_FB_USED"]
    assert len(used) == sum(len(g.mig_devices) for g in node.gpus)
    first = node.gpus[0].mig_devices[0]
    labels, value = used[0]
    assert (labels["GPU_I_PROFILE"], labels["GPU_I_ID"], labels["gpu"]) == (
        first.profile,
        str(first.gi_id),
        "0",
    )
    assert value == 13.0
    # device-level readings are the parent GPU's
    assert series["DCGM_FI_DEV_POWER_USAGE"][0][1] == a100_mig.telemetry(node.gpus[0].uuid).power_w


def test_pods_are_attributed_through_pod_resources(
    short_dir: Path, l4: RecordedNvml, a100_mig: RecordedNvml
) -> None:
    node = l4.discover()
    mig_node = a100_mig.discover()
    mig_device = mig_node.gpus[0].mig_devices[0]
    server = FakePodResources(
        short_dir / "pr.sock",
        [
            ("ml", "trainer-0", "main", "nvidia.com/gpu", [node.gpus[0].uuid]),
            ("ml", "notebook", "lab", "nvidia.com/gpu", [f"{node.gpus[1].uuid}::2"]),
            ("ml", "other", "x", "example.com/fpga", [node.gpus[2].uuid]),
            ("serve", "small", "infer", "nvidia.com/mig-1g.10gb", [mig_device.uuid]),
        ],
    )
    server.start()
    try:
        client = PodResourcesClient(server.socket)
        series = _families(render([DcgmCollector(l4, node, hostname="n", pod_resources=client)]).decode())
        mig_series = _families(
            render([DcgmCollector(a100_mig, mig_node, hostname="n", pod_resources=client)]).decode()
        )
    finally:
        server.stop()
    by_gpu = {labels["gpu"]: labels for labels, _ in series["DCGM_FI_DEV_GPU_UTIL"]}
    assert (by_gpu["0"]["pod"], by_gpu["0"]["namespace"], by_gpu["0"]["container"]) == (
        "trainer-0",
        "ml",
        "main",
    )
    assert (by_gpu["1"]["pod"], by_gpu["1"]["vgpu"]) == ("notebook", "2")
    assert "pod" not in by_gpu["2"] and "pod" not in by_gpu["3"]
    held = [labels for labels, _ in mig_series["DCGM_FI_DEV_FB_USED"] if "pod" in labels]
    assert [(h["pod"], h["GPU_I_ID"]) for h in held] == [("small", str(mig_device.gi_id))]


def test_pod_resources_socket_absent_means_no_pod_labels(short_dir: Path) -> None:
    assert PodResourcesClient(short_dir / "missing.sock").list() == []


# Lint findings inherent to dcgm-exporter's names (camelCase labels, counters without `_total`), which
# its real output draws from promtool too. Anything else (and any parse error) fails the test.
_DCGM_LINT = re.compile(
    r"^DCGM_FI_DEV_\w+ (label names should be written in 'snake_case' not 'camelCase'"
    r"|counter metrics should have \"_total\" suffix|metric name should not include type 'counter')$"
)


def test_promtool_accepts_the_exposition(h100: RecordedNvml, a100_mig: RecordedNvml) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool not installed (Debian package 'prometheus'; make test installs it where it can)"
        )
    for backend in (h100, a100_mig):
        text = render([DcgmCollector(backend, backend.discover(), hostname="n", health=HealthState())])
        result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
        problems = [line for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
        assert result.returncode in (0, 3), problems  # 1 would be a parse error
        assert [p for p in problems if not _DCGM_LINT.match(p)] == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def serve(h100: RecordedNvml) -> Iterator[Callable[..., MetricsServer]]:
    """Starts metrics servers over the recorded H100 node on loopback, with the options given."""
    started: list[MetricsServer] = []

    def start(**options: Any) -> MetricsServer:
        collector = DcgmCollector(h100, h100.discover(), hostname="node-a", health=HealthState())
        server = MetricsServer([collector], port=0, address="127.0.0.1", **options)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def metrics_server(serve: Callable[..., MetricsServer]) -> MetricsServer:
    return serve()


def test_metrics_endpoint_serves_text_format(metrics_server: MetricsServer) -> None:
    response = httpx.get(f"http://127.0.0.1:{metrics_server.port}/metrics", timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "DCGM_FI_DEV_GPU_UTIL{" in response.text
    assert httpx.get(f"http://127.0.0.1:{metrics_server.port}/other", timeout=5).status_code == 404


# Safety net only: each of these waits for an event that comes at once (or after a short timeout).
SAFETY_S = 60.0


def _scrape(server: MetricsServer) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=SAFETY_S)


def _connect(server: MetricsServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=SAFETY_S)
    sock.settimeout(SAFETY_S)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Waits for the server to end the connection; False if it sends something instead."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_idle_connections_hold_no_threads_and_scrapes_go_on(serve: Callable[..., MetricsServer]) -> None:
    server = serve(read_timeout=SAFETY_S, workers=2)
    baseline = threading.active_count()
    idle: list[socket.socket] = []
    try:
        for _ in range(200):
            idle.append(_connect(server))
        response = _scrape(server)
        assert response.status_code == 200
        assert "DCGM_FI_DEV_GPU_UTIL{" in response.text
        # The render workers at most; no thread for each connection.
        assert threading.active_count() <= baseline + 2
    finally:
        for sock in idle:
            sock.close()


def test_idle_and_slow_clients_are_disconnected_after_the_read_timeout(
    serve: Callable[..., MetricsServer],
) -> None:
    server = serve(read_timeout=0.2)
    with _connect(server) as idle, _connect(server) as slow:
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: node-a\r\n")  # and never the blank line
        assert _closed_by_server(idle)
        assert _closed_by_server(slow)
    assert _scrape(server).status_code == 200


def test_a_new_connection_past_the_limit_displaces_the_oldest_idle_one(
    serve: Callable[..., MetricsServer],
) -> None:
    server = serve(read_timeout=SAFETY_S, max_connections=4)
    idle = [_connect(server) for _ in range(4)]
    try:
        assert _scrape(server).status_code == 200
        assert _closed_by_server(idle[0])
    finally:
        for sock in idle:
            sock.close()


def test_64_concurrent_scrapers_are_all_served(metrics_server: MetricsServer) -> None:
    with ThreadPoolExecutor(max_workers=64) as scrapers:
        responses = list(scrapers.map(lambda _: _scrape(metrics_server), range(64)))
    assert [r.status_code for r in responses] == [200] * 64
    assert len({r.text.count("DCGM_FI_DEV_GPU_TEMP{") for r in responses}) == 1


def test_oversized_requests_are_cut_off(metrics_server: MetricsServer) -> None:
    long_line = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20_000 + b"\r\n\r\n"
    headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(40))
    many_headers = b"GET /metrics HTTP/1.1\r\n" + headers + b"\r\n"
    for request in (long_line, many_headers):
        with _connect(metrics_server) as sock:
            try:
                sock.sendall(request)
            except (BrokenPipeError, ConnectionResetError):
                continue  # cut off before all of it was sent
            assert _closed_by_server(sock)
    assert _scrape(metrics_server).status_code == 200


@pytest.mark.slow
def test_real_prometheus_scrapes_the_exporter(
    metrics_server: MetricsServer, h100: RecordedNvml, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "prometheus not installed (Debian package 'prometheus'; make test installs it where it can)"
        )
    web = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "- job_name: dcgm\n"
        f"  static_configs: [{{targets: ['127.0.0.1:{metrics_server.port}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        query = f"http://127.0.0.1:{web}/api/v1/query"
        deadline = time.monotonic() + 60
        results: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                response = httpx.get(
                    query, params={"query": 'DCGM_FI_DEV_GPU_TEMP{Hostname="node-a"}'}, timeout=2
                )
                # While its storage starts, Prometheus answers 503 in plain text.
                results = response.json()["data"]["result"] if response.status_code == 200 else []
            except (httpx.HTTPError, ValueError):
                results = []
            if len(results) == 8:
                break
            time.sleep(0.5)
        assert len(results) == 8, (tmp_path / "prometheus.log").read_text()[-2000:]
        node = h100.discover()
        by_gpu = {r["metric"]["gpu"]: r for r in results}  # type: ignore[index]
        gpu0 = by_gpu["0"]
        assert gpu0["metric"]["UUID"] == node.gpus[0].uuid  # type: ignore[index]
        assert gpu0["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"  # type: ignore[index]
        assert float(gpu0["value"][1]) == h100.telemetry(node.gpus[0].uuid).gpu_temp_c  # type: ignore[index]

        # A counter under its dcgm-exporter name, usable with rate() as dashboards do.
        energy = httpx.get(
            query, params={"query": "sum(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)"}, timeout=5
        ).json()
        total = sum(h100.telemetry(g.uuid).energy_mj or 0 for g in node.gpus)
        assert float(energy["data"]["result"][0]["value"][1]) == pytest.approx(total)
        busy = httpx.get(query, params={"query": "count(DCGM_FI_DEV_GPU_UTIL > 50)"}, timeout=5).json()
        assert busy["data"]["result"][0]["value"][1] == "2"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
