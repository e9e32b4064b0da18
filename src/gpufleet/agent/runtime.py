"""The node agent as one process: discovery, device plugins (or, with `--dra`, the DRA driver), health,
exporter and labels together."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gpufleet.agent.config import AgentConfig
from gpufleet.agent.deviceplugin.resources import Resource, build_resources
from gpufleet.agent.deviceplugin.server import DEVICE_PLUGIN_PATH, PluginManager
from gpufleet.agent.dra.server import DraPlugin, DraSettings
from gpufleet.agent.exporter import (
    DEFAULT_PORT,
    DEFAULT_READ_TIMEOUT,
    POD_RESOURCES_SOCKET,
    DcgmCollector,
    MetricsServer,
    PodResourcesClient,
)
from gpufleet.agent.health import HealthMonitor, HealthState
from gpufleet.agent.labels import gfd_labels, write_feature_file
from gpufleet.agent.nodeview import NodeView
from gpufleet.agent.nvml import NodeInfo, NvmlBackend
from gpufleet.api.errors import ValidationError

log = logging.getLogger("gpufleet.agent")

# Applies labels to the Node in Kubernetes; given by the CLI (only `kube` may use the client).
NodeLabeler = Callable[[str, Mapping[str, str]], None]


def parse_duration(text: str) -> float:
    """Go-style durations as NVIDIA's flags write them: `60s`, `5m`, `1h`, or plain seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    text = text.strip()
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * units[suffix]
    return float(text)


class Agent:
    """Starts every part, relabels every GFD sleep interval, and stops them in reverse order."""

    def __init__(
        self,
        backend: NvmlBackend,
        config: AgentConfig,
        *,
        node_name: str,
        plugin_dir: str | Path = DEVICE_PLUGIN_PATH,
        metrics_port: int | None = DEFAULT_PORT,
        metrics_address: str = "",
        metrics_read_timeout: float = DEFAULT_READ_TIMEOUT,
        pod_resources_socket: str | Path = POD_RESOURCES_SOCKET,
        feature_file: str | Path | None = None,
        node_labeler: NodeLabeler | None = None,
        kubelet_poll_interval: float = 1.0,
        dra: DraSettings | None = None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.node_name = node_name
        self.node: NodeInfo = backend.discover()
        self.resources: list[Resource] = build_resources(self.node, config)
        self.health = HealthState()
        self.monitor = HealthMonitor(backend, self.node, config.health, self.health)
        self.plugins = PluginManager(
            node=self.node,
            config=config,
            health=self.health,
            plugin_dir=plugin_dir,
            poll_interval=kubelet_poll_interval,
        )
        self.collector = DcgmCollector(
            backend,
            self.node,
            hostname=node_name,
            health=self.health,
            pod_resources=PodResourcesClient(pod_resources_socket),
        )
        self.metrics = (
            MetricsServer(
                [self.collector],
                port=metrics_port,
                address=metrics_address,
                read_timeout=metrics_read_timeout,
            )
            if metrics_port is not None
            else None
        )
        # The exporter and the health checks follow MIG instances the DRA driver creates and destroys.
        self.view = NodeView(backend, self.node)
        self.view.subscribe(self.monitor.set_node)
        self.view.subscribe(self.collector.set_node)
        # A node serves its GPUs either as extended resources or as DRA devices, never both: the
        # scheduler would count each GPU twice. Made last: its start reconciles MIG instances.
        self.dra: DraPlugin | None = (
            None if dra is None else dra.plugin(self.node, node_name, self.health, self.view.refresh)
        )
        self.feature_file = feature_file
        self.node_labeler = node_labeler
        self.label_interval = parse_duration(config.flags.gfd.sleep_interval)
        self._stop = threading.Event()
        self._reconfigure = threading.Lock()
        self._started = False

    def apply_config(self, config: AgentConfig, *, where: str | None = None) -> bool:
        """Switches the running agent to `config`: the device plugins re-register with the resources it
        gives (time-slicing and MPS replicas, MIG strategy) and the labels are published again. A
        config that does not fit this node (MPS on GPUs in MIG mode, a sharing entry for a resource
        the node lacks) raises ValidationError naming `where` and the field, and nothing changes.
        False when `config` is the one in force. The health checks keep the settings they started
        with (the running monitor tracks faults under them): `overlay_named_config` keeps `health`."""
        with self._reconfigure:
            if config == self.config:
                return False
            try:
                resources = build_resources(self.node, config)
            except ValidationError as exc:
                if where is None or exc.obj is not None:
                    raise
                raise ValidationError(exc.detail, obj=where, field=exc.field) from exc
            self.plugins.reconfigure(config, resources, self.node)
            self.config, self.resources = config, resources
            self.label_interval = parse_duration(config.flags.gfd.sleep_interval)
            log.info(
                "node %s: config%s applied; resources %s",
                self.node_name,
                f" from {where}" if where else "",
                {r.name: len(r.devices) for r in resources},
            )
        if self._started:
            self.publish_labels()
        return True

    def labels(self) -> dict[str, str]:
        return gfd_labels(self.node, self.config, self.resources, timestamp=int(time.time()))

    def publish_labels(self) -> None:
        labels = self.labels()
        if self.feature_file:
            try:
                write_feature_file(labels, self.feature_file)
            except OSError as exc:
                log.error("cannot write node-feature file %s: %s", self.feature_file, exc)
        if self.node_labeler is not None:
            try:
                self.node_labeler(self.node_name, labels)
            except Exception as exc:  # the API server may be away for a while; try again next interval
                log.error("cannot label node %s: %s", self.node_name, exc)

    def start(self) -> None:
        log.info(
            "node %s: %d GPUs (%s), %s",
            self.node_name,
            len(self.node.gpus),
            ", ".join(sorted({g.name for g in self.node.gpus})) or "none",
            "DRA driver gpu.nvidia.com" if self.dra else f"resources {[r.name for r in self.resources]}",
        )
        with self._reconfigure:
            self.monitor.start()
            if self.dra is not None:
                self.dra.start()
            else:
                self.plugins.start()
            self._started = True
        if self.metrics is not None:
            self.metrics.start()
        self.publish_labels()

    def run(self) -> None:
        """Blocks until `stop()`; relabels every GFD sleep interval."""
        while not self._stop.wait(self.label_interval):
            self.publish_labels()

    def stop(self) -> None:
        self._stop.set()
        if self.metrics is not None:
            self.metrics.stop()
        with self._reconfigure:
            self._started = False
            if self.dra is not None:
                self.dra.stop()
            else:
                self.plugins.stop()
            self.monitor.stop()
        self.backend.close()
