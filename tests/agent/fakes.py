"""Test doubles that speak the real protocols: a kubelet, a PodResources server, and a pynvml.

`FakeKubelet` serves `v1beta1.Registration` on `kubelet.sock` and, like kubelet, dials each plugin
back on its endpoint, asks for its options and holds its ListAndWatch stream. `FakePynvml` is a
module-like object with pynvml's functions, driven by a NodeInfo, so that `RealNvml`'s translation of
NVML's answers runs in tests; constants and error classes are the real pynvml's.
"""

from __future__ import annotations

import queue
import shutil
import threading
import uuid
from concurrent import futures
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pynvml

from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2 as pb
from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2_grpc as pb_grpc
from gpufleet.agent.deviceplugin._generated import podresources_pb2 as prpb
from gpufleet.agent.deviceplugin._generated import podresources_pb2_grpc as prpb_grpc
from gpufleet.agent.nvml import NodeInfo, Telemetry


class FakeKubelet(pb_grpc.RegistrationServicer):
    """Plays kubelet's side of the device-plugin protocol in a directory of our own."""

    def __init__(self, plugin_dir: Path) -> None:
        self.dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.registrations: queue.Queue[pb.RegisterRequest] = queue.Queue()
        self.options: dict[str, pb.DevicePluginOptions] = {}
        self.lists: dict[str, queue.Queue[pb.ListAndWatchResponse]] = {}
        self._stubs: dict[str, pb_grpc.DevicePluginStub] = {}
        self._channels: list[grpc.Channel] = []
        self._server: grpc.Server | None = None
        self._lock = threading.Lock()

    # Registration service
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        if "/" in request.endpoint:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "endpoint must be a socket file name")
        self.registrations.put(request)
        threading.Thread(target=self._connect, args=(request,), daemon=True).start()
        return pb.Empty()

    def _connect(self, request: pb.RegisterRequest) -> None:
        channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}")
        with self._lock:
            self._channels.append(channel)
        stub = pb_grpc.DevicePluginStub(channel)
        self.options[request.resource_name] = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        self._stubs[request.resource_name] = stub
        lists = self.lists.setdefault(request.resource_name, queue.Queue())
        try:
            for response in stub.ListAndWatch(pb.Empty()):
                lists.put(response)
        except grpc.RpcError:
            pass  # the plugin or this kubelet went away

    # Control
    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        with self._lock:
            for channel in self._channels:
                channel.close()
            self._channels.clear()

    def restart(self) -> None:
        """What a kubelet restart does: the directory is wiped and a new kubelet.sock appears."""
        self.stop()
        for entry in self.dir.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.lists.clear()
        self.start()

    # Helpers for tests
    def registration(self, timeout: float = 10) -> pb.RegisterRequest:
        return self.registrations.get(timeout=timeout)

    def next_list(self, resource: str, timeout: float = 10) -> pb.ListAndWatchResponse:
        deadline = threading.Event()
        waited = 0.0
        while resource not in self.lists:
            if waited > timeout:
                raise TimeoutError(f"no ListAndWatch stream for {resource}")
            deadline.wait(0.05)
            waited += 0.05
        return self.lists[resource].get(timeout=timeout)

    def stub(self, resource: str) -> pb_grpc.DevicePluginStub:
        return self._stubs[resource]


def allocatable(response: pb.ListAndWatchResponse) -> list[str]:
    return [d.ID for d in response.devices if d.health == "Healthy"]


class FakePodResources(prpb_grpc.PodResourcesListerServicer):
    """kubelet's PodResources service answering List with a fixed set of pods."""

    def __init__(self, socket: Path, pods: list[tuple[str, str, str, str, list[str]]]) -> None:
        self.socket = socket
        self.pods = pods  # (namespace, pod, container, resource, device IDs)
        self._server: grpc.Server | None = None

    def List(self, request: prpb.ListPodResourcesRequest, context: grpc.ServicerContext) -> Any:
        response = prpb.ListPodResourcesResponse()
        for namespace, name, container, resource, ids in self.pods:
            pod = response.pod_resources.add(name=name, namespace=namespace)
            c = pod.containers.add(name=container)
            c.devices.add(resource_name=resource, device_ids=ids)
        return response

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        prpb_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakePynvml:
    """pynvml's functions over a NodeInfo; unknown attributes (constants, errors) are pynvml's own."""

    def __init__(
        self, node: NodeInfo, telemetry: dict[str, Telemetry] | None = None, *, fail_init: bool = False
    ) -> None:
        self._node = node
        self._telemetry = telemetry or {}
        self._fail_init = fail_init
        self.events: queue.Queue[Any] = queue.Queue()
        self.registered: dict[int, int] = {}
        self.recovery_action: dict[int, int] = {}
        self.virtualization: dict[int, int] = {}
        # GPU index -> {vGPU instance id: licence status} on a hypervisor
        self.host_vgpus: dict[int, dict[int, int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)

    # Handles are tuples: ("gpu", i) or ("mig", i, j)
    def _gpu(self, handle: Any) -> Any:
        return self._node.gpus[handle[1]]

    def _reading(self, handle: Any, field: str) -> Any:
        uuid = self.nvmlDeviceGetUUID(handle)
        value = getattr(self._telemetry.get(uuid, Telemetry()), field)
        if value is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self) -> None:
        if self._fail_init:
            raise _error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._node.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._node.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self._node.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        for gpu in self._node.gpus:
            if gpu.uuid == uuid:
                return ("gpu", gpu.index)
            for m in gpu.mig_devices:
                if m.uuid == uuid:
                    return ("mig", gpu.index, m.index)
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu = self._gpu(handle)
        return gpu.uuid if handle[0] == "gpu" else gpu.mig_devices[handle[2]].uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu = self._gpu(handle)
        return gpu.name if handle[0] == "gpu" else f"{gpu.name} MIG {gpu.mig_devices[handle[2]].profile}"

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        gpu = self._gpu(handle)
        total = (
            (gpu.memory_mib if handle[0] == "gpu" else gpu.mig_devices[handle[2]].memory_mib) * 1024 * 1024
        )
        used = (
            int(self._reading(handle, "fb_used_mib") * 1024 * 1024) if self._has(handle, "fb_used_mib") else 0
        )
        return SimpleNamespace(total=total, used=used, free=total - used)

    def _has(self, handle: Any, field: str) -> bool:
        try:
            self._reading(handle, field)
        except pynvml.NVMLError:
            return False
        return True

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=self._gpu(handle).pci_bus_id.encode())

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        numa = self._gpu(handle).numa_node
        return -1 if numa is None else numa

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        """The GPU's fabric clique as NVML fills the struct in; not supported where it has none."""
        clique = self._gpu(handle).fabric_clique
        if clique is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        cluster, clique_id = clique.rsplit(".", 1)
        info.clusterUuid[:] = list(uuid.UUID(cluster).bytes)
        info.cliqueId = int(clique_id)
        info.state = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
        info.status = pynvml.NVML_SUCCESS
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._gpu(handle).minor_number

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        if handle[0] == "gpu":
            return SimpleNamespace(multiprocessorCount=gpu.multiprocessors)
        m = gpu.mig_devices[handle[2]]
        return SimpleNamespace(
            multiprocessorCount=m.multiprocessors,
            gpuInstanceSliceCount=m.gi_slices,
            computeInstanceSliceCount=m.ci_slices,
            sharedCopyEngineCount=m.copy_engines,
            sharedDecoderCount=m.decoders,
            sharedEncoderCount=m.encoders,
            sharedJpegCount=m.jpegs,
            sharedOfaCount=m.ofas,
            memorySizeMB=m.memory_mib,
        )

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, j: int) -> Any:
        if j >= len(self._gpu(handle).mig_devices):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], j)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> Any:
        return ("gpu", handle[1])

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return self._gpu(handle).mig_devices[handle[2]].gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        return self._gpu(handle).mig_devices[handle[2]].ci_id

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi: int) -> Any:
        return ("gi", handle[1], gi)

    def nvmlGpuInstanceGetInfo(self, gi_handle: Any) -> Any:
        gpu = self._node.gpus[gi_handle[1]]
        m = next(m for m in gpu.mig_devices if m.gi_id == gi_handle[2])
        return SimpleNamespace(
            id=m.gi_id,
            profileId=m.gi_profile_id,
            placement=SimpleNamespace(start=m.placement_start, size=m.placement_size),
        )

    def _links(self, handle: Any) -> list[tuple[int, int | None]]:
        """(remote type, peer index) per active link."""
        gpu = self._gpu(handle)
        links: list[tuple[int, int | None]] = [
            (pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH, None)
        ] * gpu.nvlink_switch_links
        for peer, count in sorted(gpu.nvlink_peers.items()):
            links += [(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, peer)] * count
        return links

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        if link >= len(self._links(handle)):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return self._links(handle)[link][0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        peer = self._links(handle)[link][1]
        assert peer is not None
        return SimpleNamespace(busId=self._node.gpus[peer].pci_bus_id)

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int:
        return self._node.pcie_ancestors[a[1]][b[1]]

    # Telemetry
    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> float:
        return self._reading(handle, "sm_clock_mhz" if clock == pynvml.NVML_CLOCK_SM else "mem_clock_mhz")

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> float:
        return self._reading(handle, "gpu_temp_c")

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> float:
        return self._reading(handle, "power_w") * 1000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> float:
        return self._reading(handle, "energy_mj")

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> float:
        return self._reading(
            handle, "pcie_tx_kb" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kb"
        )

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> float:
        return self._reading(handle, "pcie_replays")

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return SimpleNamespace(
            gpu=self._reading(handle, "gpu_util"), memory=self._reading(handle, "mem_copy_util")
        )

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> tuple[float, int]:
        return self._reading(handle, "enc_util"), 167000

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> tuple[float, int]:
        return self._reading(handle, "dec_util"), 167000

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return (
            int(self._reading(handle, "correctable_remapped_rows")),
            int(self._reading(handle, "uncorrectable_remapped_rows")),
            0,
            int(self._reading(handle, "row_remap_failure")),
        )

    # vGPU: bare metal unless a test sets a GPU's mode; a guest's licence state is its telemetry reading.
    def nvmlDeviceGetVirtualizationMode(self, handle: Any) -> int:
        return self.virtualization.get(handle[1], pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE)

    def nvmlDeviceGetGridLicensableFeatures(self, handle: Any) -> Any:
        licensed = int(self._reading(handle, "vgpu_license_status"))
        feature = SimpleNamespace(
            featureCode=pynvml.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE, featureState=licensed
        )
        return SimpleNamespace(
            isGridLicenseSupported=1, licensableFeaturesCount=1, gridLicensableFeatures=[feature]
        )

    def nvmlDeviceGetActiveVgpus(self, handle: Any) -> list[int]:
        return list(self.host_vgpus.get(handle[1], {}))

    def nvmlVgpuInstanceGetLicenseStatus(self, instance: int) -> int:
        for vgpus in self.host_vgpus.values():
            if instance in vgpus:
                return vgpus[instance]
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetFieldValues(self, handle: Any, ids: list[int]) -> list[Any]:
        out = []
        for field_id in ids:
            value: float | None = None
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                value = self._reading(handle, "memory_temp_c") if self._has(handle, "memory_temp_c") else None
            elif field_id in (
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            ):
                total = (
                    self._reading(handle, "nvlink_bandwidth_total")
                    if self._has(handle, "nvlink_bandwidth_total")
                    else None
                )
                value = None if total is None else total / 2
            elif field_id == getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", -1):
                value = self.recovery_action.get(handle[1], 0)
            ret = pynvml.NVML_SUCCESS if value is not None else pynvml.NVML_ERROR_NOT_SUPPORTED
            out.append(
                SimpleNamespace(
                    nvmlReturn=ret,
                    valueType=pynvml.NVML_VALUE_TYPE_DOUBLE,
                    value=SimpleNamespace(dVal=value or 0.0),
                )
            )
        return out

    # Health
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return 0

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return (
            pynvml.nvmlEventTypeXidCriticalError
            | pynvml.nvmlEventTypeDoubleBitEccError
            | pynvml.nvmlEventTypePState
        )

    def nvmlDeviceRegisterEvents(self, handle: Any, mask: int, event_set: Any) -> None:
        self.registered[handle[1]] = mask

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        try:
            item = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise _error(pynvml.NVML_ERROR_TIMEOUT) from None
        if isinstance(item, Exception):
            raise item
        return item

    def nvmlEventSetFree(self, event_set: Any) -> None:
        pass

    def push_xid(self, gpu: int, xid: int, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF) -> None:
        self.events.put(
            SimpleNamespace(
                device=("gpu", gpu),
                eventType=pynvml.nvmlEventTypeXidCriticalError,
                eventData=xid,
                gpuInstanceId=gi,
                computeInstanceId=ci,
            )
        )
