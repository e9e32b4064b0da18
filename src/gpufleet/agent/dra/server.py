"""The kubelet's side of the DRA driver: the DRAPlugin service (v1, and v1beta1 for 1.32-1.33 kubelets)
on the plugin's socket, and registration through the kubelet's plugin registry.

Flow (k8s.io/kubelet/pkg/apis/pluginregistration/v1): the plugin serves `Registration` on a socket in
`/var/lib/kubelet/plugins_registry/`; the kubelet's plugin watcher sees the socket, calls `GetInfo`
(type `DRAPlugin`, the driver name, the DRA socket's path, the services served there) and then
`NotifyRegistrationStatus` with whether it took the plugin. From then on it calls
`NodePrepareResources` before a pod's containers start and `NodeUnprepareResources` once the pod is
gone. A kubelet that restarts finds the registration socket again, so nothing is re-sent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpufleet.agent.dra import cdi
from gpufleet.agent.dra._generated import dra_v1_pb2, dra_v1beta1_pb2
from gpufleet.agent.dra._generated import dra_v1_pb2_grpc as _v1_grpc
from gpufleet.agent.dra._generated import dra_v1beta1_pb2_grpc as _v1beta1_grpc
from gpufleet.agent.dra._generated import pluginregistration_pb2 as regpb
from gpufleet.agent.dra._generated import pluginregistration_pb2_grpc as _reg_grpc
from gpufleet.agent.dra.driver import ClaimReader, ClaimRef, DraDriver, SlicePublisher, prepare_all
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import NodeInfo
from gpufleet.agent.nvml.migctl import MigControl
from gpufleet.sharing.dra_slices import DRIVER

log = logging.getLogger("gpufleet.agent.dra")
# protoc writes no annotations for gRPC stubs.
v1_grpc: Any = _v1_grpc
v1beta1_grpc: Any = _v1beta1_grpc
reg_grpc: Any = _reg_grpc

PLUGIN_TYPE = "DRAPlugin"
PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"
PLUGINS_DIR = "/var/lib/kubelet/plugins"
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""What GetInfo lists as supported versions: the services the DRA socket serves."""
WORKERS = 8


@dataclass(frozen=True, slots=True)
class DraSettings:
    """What `gpufleet agent --dra` is given: the API server's side (from `kube`) and the kubelet's dirs."""

    read_claim: ClaimReader
    publish: SlicePublisher | None
    plugins_dir: Path = field(default=Path(PLUGINS_DIR))
    registry_dir: Path = field(default=Path(PLUGINS_REGISTRY))
    cdi_dir: Path = field(default=Path(cdi.CDI_DIR))
    common_edits: Mapping[str, Any] | None = None
    """The driver's spec-wide CDI edits (libraries, hooks) from the toolkit (`toolkit.common_edits`)."""
    mig_control: MigControl | None = None
    """Dynamic MIG (`dynmig.py`): MIG-enabled GPUs publish every placement, made at prepare through it."""

    def plugin(
        self,
        node: NodeInfo,
        node_name: str,
        health: HealthState,
        on_mig_change: Callable[[], object] | None = None,
    ) -> DraPlugin:
        """The driver for this node, its state (the checkpoint) beside its socket; `on_mig_change` is
        called after each MIG instance dynamic MIG creates or destroys."""
        driver = DraDriver(
            node,
            node_name=node_name,
            health=health,
            read_claim=self.read_claim,
            publish=self.publish,
            state_dir=self.plugins_dir / DRIVER,
            cdi_dir=self.cdi_dir,
            common_edits=self.common_edits,
            mig_control=self.mig_control,
            on_mig_change=on_mig_change,
        )
        return DraPlugin(driver, plugins_dir=self.plugins_dir, registry_dir=self.registry_dir)


def _unix(path: Path) -> str:
    return f"unix://{path.absolute()}"


class DraServicer:
    """`DRAPlugin` over one version's messages (v1 and v1beta1 have the same ones)."""

    def __init__(self, driver: DraDriver, pb: Any) -> None:
        self._driver = driver
        self._pb = pb

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        refs = [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]
        response = self._pb.NodePrepareResourcesResponse()
        for uid, result in prepare_all(self._driver, refs).items():
            entry = response.claims[uid]
            if isinstance(result, str):
                entry.error = result
                continue
            for device in result:
                entry.devices.add(
                    request_names=list(device.requests),
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self._pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            ref = ClaimRef(claim.namespace, claim.uid, claim.name)
            entry = response.claims[claim.uid]
            try:
                self._driver.unprepare(ref)
            except Exception as exc:  # the kubelet retries
                log.error("unpreparing %s failed: %s", ref, exc)
                entry.error = f"{ref}: {exc}"
        return response


class RegistrationServicer:
    def __init__(self, plugin: DraPlugin) -> None:
        self._plugin = plugin

    def GetInfo(self, request: regpb.InfoRequest, context: grpc.ServicerContext) -> regpb.PluginInfo:
        return regpb.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self._plugin.socket.absolute()),
            supported_versions=list(SERVICES),
        )

    def NotifyRegistrationStatus(
        self, request: regpb.RegistrationStatus, context: grpc.ServicerContext
    ) -> regpb.RegistrationStatusResponse:
        self._plugin.on_registration(request.plugin_registered, request.error)
        return regpb.RegistrationStatusResponse()


class DraPlugin:
    """Serves the DRA socket and the registration socket, and keeps the driver's slices current."""

    def __init__(
        self,
        driver: DraDriver,
        *,
        plugins_dir: str | Path = PLUGINS_DIR,
        registry_dir: str | Path = PLUGINS_REGISTRY,
    ) -> None:
        self.driver = driver
        self.socket = Path(plugins_dir) / DRIVER / "dra.sock"
        self.registration_socket = Path(registry_dir) / f"{DRIVER}-reg.sock"
        self.registered = threading.Event()
        self.registration_error = ""
        self._servers: list[grpc.Server] = []

    def on_registration(self, registered: bool, error: str) -> None:
        self.registration_error = error
        if registered:
            log.info("the kubelet registered DRA driver %s", DRIVER)
            self.registered.set()
        else:
            log.error("the kubelet refused DRA driver %s: %s", DRIVER, error)
            self.registered.clear()

    def start(self) -> None:
        """Serves the DRA API, then the registration socket (the kubelet may dial back at once)."""
        self.driver.start()
        dra = self._serve(self.socket)
        v1_grpc.add_DRAPluginServicer_to_server(DraServicer(self.driver, dra_v1_pb2), dra)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraServicer(self.driver, dra_v1beta1_pb2), dra)
        dra.start()
        registration = self._serve(self.registration_socket)
        reg_grpc.add_RegistrationServicer_to_server(RegistrationServicer(self), registration)
        registration.start()
        self._servers = [dra, registration]
        log.info("DRA driver %s on %s, registration on %s", DRIVER, self.socket, self.registration_socket)

    def _serve(self, socket: Path) -> grpc.Server:
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)  # a stale socket of an earlier run
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=socket.name))
        server.add_insecure_port(_unix(socket))
        return server

    def stop(self, grace: float = 1.0) -> None:
        """Stops serving and removes the registration socket, so the kubelet unregisters the driver."""
        for server in reversed(self._servers):
            server.stop(grace).wait()
        self._servers = []
        self.registration_socket.unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        self.driver.stop()
