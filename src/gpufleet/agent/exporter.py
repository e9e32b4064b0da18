"""A DCGM-exporter-compatible metrics endpoint (port 9400) over NVML.

Metric names, types, help texts and units are those of dcgm-exporter's `etc/default-counters.csv`;
labels are its `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, plus `GPU_I_PROFILE`
and `GPU_I_ID` on MIG devices, and `pod`, `namespace`, `container` (and `vgpu` for a shared replica)
when the kubelet PodResources API says a container holds the device. Dashboards and alerts written
for dcgm-exporter work unchanged. A counter is left out for a device whose NVML does not report it:
`DCGM_FI_DEV_VGPU_LICENSE_STATUS` (1 licensed, 0 not) is read from NVML's licensable features (a vGPU in
a VM) or its vGPU instances' licences (a hypervisor), and left out where NVML says vGPU licensing is not
supported, as on bare-metal GPUs.

`DcgmCollector` is a prometheus_client collector, reading NVML on every scrape so that no series of a
finished pod or a removed MIG device lingers. The endpoint does not use prometheus_client's text
writer, which appends `_total` to every counter's name: dcgm-exporter's counters
(`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, ...) have no such suffix, and renaming them would break every
query written against it. `render` writes the same text format with the names as they are.
"""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gpufleet.agent.deviceplugin._generated import podresources_pb2 as prpb
from gpufleet.agent.deviceplugin._generated import podresources_pb2_grpc as _prpb_grpc
from gpufleet.agent.deviceplugin.resources import REPLICA_SEPARATOR
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import Gpu, MigDevice, NodeInfo, NvmlBackend, Telemetry
from gpufleet.api.numerals import plain_digits

log = logging.getLogger("gpufleet.agent.exporter")

# Untyped modules, named with types: protoc writes no annotations for gRPC stubs.
prpb_grpc: Any = _prpb_grpc
_go_float: Callable[[float], str] = floatToGoString

DEFAULT_PORT = 9400
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Counter:
    """One row of dcgm-exporter's default-counters.csv and the Telemetry field that feeds it."""

    name: str
    type: str
    help: str
    field: str


# dcgm-exporter etc/default-counters.csv, in its order; XID_ERRORS comes from the health monitor.
DEFAULT_COUNTERS: tuple[Counter, ...] = (
    Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    Counter("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    Counter("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "memory_temp_c"),
    Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "gpu_temp_c"),
    Counter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    Counter(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "energy_mj",
    ),
    Counter(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "counter",
        "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
        "pcie_tx_kb",
    ),
    Counter(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "counter",
        "Total number of bytes received through PCIe RX (in KB) via NVML.",
        "pcie_rx_kb",
    ),
    Counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "pcie_replays"),
    Counter("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util"),
    Counter("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "mem_copy_util"),
    Counter("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "enc_util"),
    Counter("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "dec_util"),
    Counter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "xid"),
    Counter("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    Counter("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    Counter(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes",
        "nvlink_bandwidth_total",
    ),
    Counter("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "vgpu_license_status"),
    Counter(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "uncorrectable_remapped_rows",
    ),
    Counter(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "correctable_remapped_rows",
    ),
    Counter(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "row_remap_failure"
    ),
)

# Resources whose devices the exporter attributes to pods (dcgm-exporter's defaults).
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True, slots=True)
class PodDevice:
    """A device that kubelet gave to a container."""

    pod: str
    namespace: str
    container: str
    resource: str
    device_id: str


class PodResourcesClient:
    """Calls kubelet's PodResources `List`; returns nothing when the socket is absent or the call fails."""

    def __init__(self, socket: str | Path = POD_RESOURCES_SOCKET, *, timeout: float = 2.0) -> None:
        self.socket = Path(socket)
        self._timeout = timeout

    def list(self) -> list[PodDevice]:
        if not self.socket.exists():
            return []
        try:
            with grpc.insecure_channel(f"unix://{self.socket.absolute()}") as channel:
                response = prpb_grpc.PodResourcesListerStub(channel).List(
                    prpb.ListPodResourcesRequest(), timeout=self._timeout
                )
        except grpc.RpcError as exc:
            log.warning("PodResources List on %s failed: %s", self.socket, exc)
            return []
        out = []
        for pod in response.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    name = devices.resource_name
                    if not (name.startswith(GPU_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX)):
                        continue
                    for device_id in devices.device_ids:
                        out.append(PodDevice(pod.name, pod.namespace, container.name, name, device_id))
        return out


@dataclass(frozen=True, slots=True)
class _Entity:
    gpu: Gpu
    mig: MigDevice | None
    telemetry: Telemetry
    xid: int

    @property
    def labels(self) -> dict[str, str]:
        labels = {
            "gpu": str(self.gpu.index),
            "UUID": self.gpu.uuid,
            "pci_bus_id": self.gpu.pci_bus_id,
            "device": f"nvidia{self.gpu.minor_number}",
            "modelName": self.gpu.name,
        }
        if self.mig is not None:
            labels["GPU_I_PROFILE"] = self.mig.profile
            labels["GPU_I_ID"] = str(self.mig.gi_id)
        return labels

    def value(self, counter: Counter) -> float | None:
        if counter.field == "xid":
            return float(self.xid)
        value: float | None = getattr(self.telemetry, counter.field)
        return value


class DcgmCollector(Collector):
    """Yields the default DCGM metrics of every GPU (every MIG device on MIG-enabled GPUs)."""

    def __init__(
        self,
        backend: NvmlBackend,
        node: NodeInfo,
        *,
        hostname: str,
        health: HealthState | None = None,
        pod_resources: PodResourcesClient | None = None,
    ) -> None:
        self._backend = backend
        self._node = node
        self._hostname = hostname
        self._health = health
        self._pods = pod_resources

    def set_node(self, node: NodeInfo) -> None:
        """Follows MIG instances created or destroyed since discovery (dynamic MIG); the next scrape
        reports the new layout."""
        self._node = node

    def _entities(self) -> Iterator[_Entity]:
        for gpu in self._node.gpus:
            telemetry = self._backend.telemetry(gpu.uuid)
            xid = self._health.last_xid(gpu.uuid) if self._health else 0
            if not gpu.mig_devices:
                yield _Entity(gpu, None, telemetry, xid)
                continue
            # Device-level readings are the GPU's; memory is each instance's own.
            for device in gpu.mig_devices:
                own = self._backend.telemetry(device.uuid)
                merged = replace(
                    telemetry,
                    **{f.name: getattr(own, f.name) for f in fields(own) if getattr(own, f.name) is not None},
                )
                yield _Entity(gpu, device, merged, xid)

    def _holders(self) -> dict[str, list[tuple[PodDevice, int | None]]]:
        """Device UUID (or index form) -> the containers holding it, with the replica they hold."""
        holders: dict[str, list[tuple[PodDevice, int | None]]] = {}
        if self._pods is None:
            return holders
        for held in self._pods.list():
            base, _, replica = held.device_id.partition(REPLICA_SEPARATOR)
            holders.setdefault(base, []).append((held, int(replica) if plain_digits(replica) else None))
        return holders

    def collect(self) -> Iterator[Metric]:
        holders = self._holders()
        entities = list(self._entities())
        rows: list[tuple[dict[str, str], _Entity]] = []
        for entity in entities:
            base = entity.labels
            keys = (
                [entity.mig.uuid, f"{entity.gpu.index}:{entity.mig.index}"]
                if entity.mig
                else [entity.gpu.uuid, str(entity.gpu.index)]
            )
            held = [h for key in keys for h in holders.get(key, [])]
            if not held:
                rows.append((base, entity))
            for pod, replica in held:
                labels = dict(base, pod=pod.pod, namespace=pod.namespace, container=pod.container)
                if replica is not None:
                    labels["vgpu"] = str(replica)
                rows.append((labels, entity))
        for counter in DEFAULT_COUNTERS:
            metric = Metric(counter.name, counter.help, counter.type)
            for labels, entity in rows:
                value = entity.value(counter)
                if value is not None:
                    metric.add_sample(counter.name, dict(labels, Hostname=self._hostname), value)
            if metric.samples:
                yield metric


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(collectors: Iterable[Collector]) -> bytes:
    """Prometheus text format (0.0.4) with metric names exactly as collected."""
    out: list[str] = []
    for collector in collectors:
        for metric in collector.collect():
            kind = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}.get(metric.type, metric.type)
            doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {metric.name} {doc}\n")
            out.append(f"# TYPE {metric.name} {kind}\n")
            for sample in metric.samples:
                labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels.items()))
                label_text = f"{{{labels}}}" if labels else ""
                out.append(f"{sample.name}{label_text} {_go_float(sample.value)}\n")
    return "".join(out).encode()


# A client has this long from connecting to send its whole request, and as long to take the answer.
DEFAULT_READ_TIMEOUT = 10.0
# Scrapes rendered at once; more wait for a free worker (a scrape reads NVML, which is quick).
DEFAULT_WORKERS = 4
# Open connections at most; a new one beyond it displaces the oldest still sending its request.
DEFAULT_MAX_CONNECTIONS = 512
LISTEN_BACKLOG = 128
_MAX_LINE = 8 * 1024
_MAX_HEAD = 32 * 1024


class _HeadTooLarge(Exception):
    pass


class _Exchange(BaseHTTPRequestHandler):
    """One request, answered from its bytes into bytes: parsing, status lines and error pages are
    http.server's; the sockets stay with the event loop, so no thread waits on a client."""

    def __init__(self, head: bytes, client: tuple[str, int], render_now: Callable[[], bytes]) -> None:
        self._head = head
        self._render_now = render_now
        no_socket: Any = None  # setup() below reads and writes buffers instead
        super().__init__(no_socket, client, no_socket)

    def setup(self) -> None:
        self.rfile = io.BytesIO(self._head)
        self.wfile = io.BytesIO()

    def finish(self) -> None:
        pass  # the answer stays readable in wfile

    def answer(self) -> bytes:
        out = self.wfile
        assert isinstance(out, io.BytesIO)
        return out.getvalue()

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        try:
            body = self._render_now()
        except Exception as exc:  # a failed scrape must not kill the server
            log.exception("scrape failed")
            self.send_error(500, str(exc))
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("metrics: " + format, *args)


def _answer(head: bytes, client: tuple[str, int], render_now: Callable[[], bytes]) -> bytes:
    return _Exchange(head, client, render_now).answer()


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The request line and headers, up to the blank line; None if the client closed first."""
    head = bytearray()
    while True:
        try:
            line = await reader.readline()
        except ValueError as exc:  # a line longer than the reader's limit
            raise _HeadTooLarge from exc
        if not line.endswith(b"\n"):
            return None
        head += line
        if len(head) > _MAX_HEAD:
            raise _HeadTooLarge
        if line in (b"\r\n", b"\n"):
            return bytes(head)


class MetricsServer:
    """Serves `render(collectors)` on /metrics from an event loop in a daemon thread.

    Connections cost no thread: the loop reads each request and writes each answer, and only
    rendering runs on a small pool of workers. A client that has not sent its whole request within
    `read_timeout` of connecting, or has not taken the answer within as long again, is disconnected,
    so idle or slow clients cannot pile up; past `max_connections` the oldest still sending its
    request makes room. One request per connection, answered with HTTP/1.0 as before.
    """

    def __init__(
        self,
        collectors: Sequence[Collector],
        *,
        port: int = DEFAULT_PORT,
        address: str = "",
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        workers: int = DEFAULT_WORKERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        def render_now() -> bytes:
            return render(collectors)

        self._render_now = render_now
        self.read_timeout = read_timeout
        self._max_connections = max_connections
        # Bound here so that a port in use fails the constructor, as the caller expects.
        self._socket = socket.create_server((address, port), backlog=LISTEN_BACKLOG)
        self.port: int = self._socket.getsockname()[1]
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpufleet-metrics-render")
        self._loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()
        # Open connections in the order they came, each with whether it is still sending its request.
        self._connections: dict[asyncio.Task[Any], bool] = {}
        self._thread = threading.Thread(target=self._run, name="gpufleet-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("metrics on :%d/metrics", self.port)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join()
        else:  # never started
            self._socket.close()
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._on_connection, sock=self._socket, limit=_MAX_LINE)
        await self._stopping.wait()
        server.close()
        # Every connection's task, also those accepted but not yet run, so that none is left pending.
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    def _make_room(self) -> bool:
        """Whether a new connection may stay, after displacing the oldest still sending a request."""
        if len(self._connections) < self._max_connections:
            return True
        oldest = next((task for task, reading in self._connections.items() if reading), None)
        if oldest is None:
            return False
        oldest.cancel()
        del self._connections[oldest]
        return True

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if not self._make_room():
            writer.transport.abort()
            return
        self._connections[task] = True
        # drain() then returns only once everything is with the kernel, so that closing never leaves
        # an answer behind for a client that stopped reading.
        writer.transport.set_write_buffer_limits(high=0)
        answered = False
        try:
            answered = await self._exchange(task, reader, writer)
        except (TimeoutError, ConnectionError, asyncio.CancelledError, _HeadTooLarge):
            # An idle, slow or vanished client, the server stopping, or a request head larger than
            # any scraper's: disconnect. The last gets no 431, since closing with its rest unread
            # resets the connection, and the client would likely see the reset, not the answer.
            pass
        finally:
            self._connections.pop(task, None)
            if answered:
                writer.close()
            else:
                writer.transport.abort()

    async def _exchange(
        self, task: asyncio.Task[Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Reads one request and sends its answer; False if the client closed before asking."""
        async with asyncio.timeout(self.read_timeout):
            head = await _read_head(reader)
        if head is None:
            return False
        self._connections[task] = False
        peer = writer.get_extra_info("peername")
        client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else ("", 0)
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self._pool, _answer, head, client, self._render_now)
        await self._send(writer, answer)
        return True

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        async with asyncio.timeout(self.read_timeout):
            await writer.drain()
