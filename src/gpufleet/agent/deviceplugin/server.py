"""The kubelet device-plugin gRPC servers, their registration, and re-registration after kubelet restarts.

Flow (NVIDIA-STACK.md section 1): each resource's plugin removes any stale socket, serves
`v1beta1.DevicePlugin` on `<plugin dir>/<name>.sock`, checks it answers by dialing itself, then calls
`v1beta1.Registration/Register` on `kubelet.sock` with the socket's *file name*. Kubelet dials back and
holds a ListAndWatch stream, to which the plugin sends the full device list at once and again after
every health change. A kubelet restart wipes the directory and creates a new `kubelet.sock`; the
manager notices the new socket and restarts and re-registers every plugin, as NVIDIA's does.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gpufleet.agent.config import AgentConfig
from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2 as pb
from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2_grpc as _pb_grpc
from gpufleet.agent.deviceplugin.allocation import AllocationError, allocate, preferred_allocation
from gpufleet.agent.deviceplugin.resources import Resource, build_resources
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import NodeInfo

log = logging.getLogger("gpufleet.agent.deviceplugin")
# protoc writes no annotations for gRPC stubs.
pb_grpc: Any = _pb_grpc

VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

# The sync gRPC server runs each call on a worker thread, and a ListAndWatch stream keeps its thread
# for as long as it is open. Kubelet holds one stream per plugin (two for a moment when it dials
# again), so streams get at most MAX_STREAMS workers and the unary calls kubelet makes at pod
# admission (Allocate, GetPreferredAllocation) keep UNARY_WORKERS of their own that open streams
# cannot take. A stream beyond the limit is refused with RESOURCE_EXHAUSTED.
MAX_STREAMS = 16
UNARY_WORKERS = 8
# Calls waiting for a worker beyond these are refused (RESOURCE_EXHAUSTED) rather than queued.
MAX_QUEUED_CALLS = 64


def _unix(path: Path) -> str:
    return f"unix://{path.absolute()}"


class DevicePluginServicer:
    """`v1beta1.DevicePlugin` for one resource: every method, so no generated base class is needed."""

    def __init__(self, plugin: ResourcePlugin) -> None:
        self._plugin = plugin
        self._streams = threading.BoundedSemaphore(MAX_STREAMS)

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return OPTIONS

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        plugin = self._plugin
        health = plugin.health
        if not self._streams.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{MAX_STREAMS} ListAndWatch streams of '{plugin.resource.name}' are open already",
            )
        ended = threading.Event()

        def stopped() -> bool:
            return ended.is_set() or plugin.stopping.is_set()

        def on_end() -> None:
            # Runs once when the call ends, however it ends: the stream's slot is free again.
            ended.set()
            self._streams.release()
            health.wake()

        if not context.add_callback(on_end):
            on_end()  # the call ended before the callback could be registered
            return
        version = health.version
        last: pb.ListAndWatchResponse | None = None
        while not stopped():
            current = plugin.device_list()
            if current != last:
                last = current
                yield current
            version = health.wait_for_change(version, stopped)

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        plugin = self._plugin
        response = pb.PreferredAllocationResponse()
        try:
            for req in request.container_requests:
                ids = preferred_allocation(
                    plugin.resource,
                    plugin.node,
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    int(req.allocation_size),
                    policy=plugin.config.flags.plugin.shared_devices_allocation_policy,
                )
                response.container_responses.add(deviceIDs=ids)
        except AllocationError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"error getting preferred allocation: {exc}")
        return response

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        plugin = self._plugin
        response = pb.AllocateResponse()
        try:
            for req in request.container_requests:
                ids = list(req.devices_ids)
                unhealthy = [i for i in ids if plugin.device_healthy(i) is False]
                if unhealthy:
                    raise AllocationError(f"devices of '{plugin.resource.name}' are unhealthy: {unhealthy}")
                response.container_responses.append(
                    allocate(plugin.resource, plugin.node, plugin.config, ids)
                )
        except AllocationError as exc:
            log.warning("Allocate failed: %s", exc)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return response

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


OPTIONS = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


class ResourcePlugin:
    """Serves one resource on its own unix socket and registers it with kubelet."""

    def __init__(
        self,
        *,
        resource: Resource,
        node: NodeInfo,
        config: AgentConfig,
        health: HealthState,
        plugin_dir: Path,
    ) -> None:
        self.resource = resource
        self.node = node
        self.config = config
        self.health = health
        self.socket = plugin_dir / resource.socket_name
        self.stopping = threading.Event()
        self._server: grpc.Server | None = None

    def device_healthy(self, device_id: str) -> bool | None:
        """Whether the device is healthy; None for an ID this resource does not have."""
        device = self.resource.device(device_id)
        return None if device is None else self.health.is_healthy(device.uuid, device.gpu.uuid)

    def device_list(self) -> pb.ListAndWatchResponse:
        response = pb.ListAndWatchResponse()
        for device in self.resource.devices:
            item = response.devices.add(
                ID=device.id,
                health=HEALTHY if self.health.is_healthy(device.uuid, device.gpu.uuid) else UNHEALTHY,
            )
            if device.numa_node is not None:
                item.topology.nodes.add(ID=device.numa_node)
        return response

    def start(self) -> None:
        self.stopping.clear()
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        if self.socket.exists() or self.socket.is_symlink():
            self.socket.unlink()
        workers = MAX_STREAMS + UNARY_WORKERS
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=self.resource.socket_name),
            maximum_concurrent_rpcs=workers + MAX_QUEUED_CALLS,
        )
        pb_grpc.add_DevicePluginServicer_to_server(DevicePluginServicer(self), server)
        server.add_insecure_port(_unix(self.socket))
        server.start()
        self._server = server
        with grpc.insecure_channel(_unix(self.socket)) as channel:
            grpc.channel_ready_future(channel).result(timeout=5)
        log.info("serving %s on %s", self.resource.name, self.socket)

    def register(self, kubelet_socket: Path, *, timeout: float = 5.0) -> None:
        with grpc.insecure_channel(_unix(kubelet_socket)) as channel:
            pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource.name,
                    options=OPTIONS,
                ),
                timeout=timeout,
            )
        log.info("registered %s with kubelet", self.resource.name)

    def stop(self, grace: float = 1.0) -> None:
        self.stopping.set()
        self.health.wake()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        if self.socket.exists():
            self.socket.unlink()


class PluginManager:
    """Starts a plugin per resource and restarts them all whenever kubelet's socket is recreated."""

    def __init__(
        self,
        *,
        node: NodeInfo,
        config: AgentConfig,
        health: HealthState,
        plugin_dir: str | Path = DEVICE_PLUGIN_PATH,
        poll_interval: float = 1.0,
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.kubelet_socket = self.plugin_dir / KUBELET_SOCKET
        self.health = health
        self.resources = build_resources(node, config)
        self.plugins = [
            ResourcePlugin(resource=r, node=node, config=config, health=health, plugin_dir=self.plugin_dir)
            for r in self.resources
        ]
        self._poll = poll_interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seen: Any = None
        self._thread: threading.Thread | None = None
        self._pending: list[ResourcePlugin] = []
        self._running = False
        self.registrations = 0

    def start(self) -> None:
        self._seen = self._socket_identity()
        with self._lock:
            self._running = True
            self._start_all_locked()
        self._thread = threading.Thread(target=self._watch, name="gpufleet-kubelet-watch", daemon=True)
        self._thread.start()

    def restart(self) -> None:
        """Stops, serves and registers every plugin again (also on SIGHUP)."""
        with self._lock:
            for plugin in self.plugins:
                plugin.stop()
            self._start_all_locked()

    def reconfigure(self, config: AgentConfig, resources: list[Resource], node: NodeInfo) -> None:
        """Serves `resources` (built from `config`) instead of the current ones and registers them, as
        NVIDIA's plugin does when its config-manager restarts it: kubelet drops the resources whose
        plugin went away and takes the new device lists. If a new plugin cannot be served, the old
        ones are served again and the error raised, so the node never advertises half of each."""
        with self._lock:
            old, old_resources = self.plugins, self.resources
            for plugin in old:
                plugin.stop()
            fresh = [
                ResourcePlugin(
                    resource=r, node=node, config=config, health=self.health, plugin_dir=self.plugin_dir
                )
                for r in resources
            ]
            self.plugins, self.resources = fresh, list(resources)
            if not self._running:
                return  # start() serves them
            try:
                self._start_all_locked()
            except Exception:
                for plugin in fresh:
                    plugin.stop()
                self.plugins, self.resources = old, old_resources
                self._start_all_locked()
                raise

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._poll + 5)
        with self._lock:
            self._running = False
            for plugin in self.plugins:
                plugin.stop()

    def _start_all_locked(self) -> None:
        for plugin in self.plugins:
            plugin.start()
        self._pending = list(self.plugins)
        if not self.kubelet_socket.exists():
            log.warning("no kubelet socket at %s yet; will register when it appears", self.kubelet_socket)
            return
        self._register_pending_locked()

    def _register_pending_locked(self) -> None:
        """Registers the plugins not yet registered; those that fail are retried at the next poll."""
        for plugin in list(self._pending):
            try:
                plugin.register(self.kubelet_socket)
            except grpc.RpcError as exc:
                log.error("registering %s with kubelet failed (will retry): %s", plugin.resource.name, exc)
                continue
            self._pending.remove(plugin)
            self.registrations += 1

    def _socket_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.kubelet_socket)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_ctime_ns

    def _watch(self) -> None:
        while not self._stop.wait(self._poll):
            identity = self._socket_identity()
            if identity != self._seen:
                self._seen = identity
                if identity is not None:
                    log.info("kubelet socket %s was (re)created; re-registering", self.kubelet_socket)
                    self.restart()
            elif identity is not None and self._pending:
                with self._lock:
                    self._register_pending_locked()
