"""The device plugin against a test that plays kubelet over real unix sockets and gRPC."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpufleet.agent.config import AgentConfig, parse_config
from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2 as pb
from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2_grpc as _pb_grpc
from gpufleet.agent.deviceplugin.server import MAX_STREAMS, PluginManager
from gpufleet.agent.health import HealthMonitor, HealthState
from gpufleet.agent.nvml import RecordedNvml

from .fakes import FakeKubelet, allocatable

FAST_HEALTH = {"health": {"waitTimeoutMs": 50}}
# Safety net for calls that should answer at once; a hang fails the test instead of stalling it.
SAFETY_S = 60
pb_grpc: Any = _pb_grpc


class Running:
    """A plugin manager and health monitor over a recorded node, as the agent runs them."""

    def __init__(self, backend: RecordedNvml, kubelet: FakeKubelet, config: AgentConfig) -> None:
        self.backend = backend
        self.node = backend.discover()
        self.state = HealthState()
        self.monitor = HealthMonitor(backend, self.node, config.health, self.state)
        self.manager = PluginManager(
            node=self.node, config=config, health=self.state, plugin_dir=kubelet.dir, poll_interval=0.05
        )

    def start(self) -> Running:
        self.monitor.start()
        self.manager.start()
        return self

    def stop(self) -> None:
        self.manager.stop()
        self.monitor.stop()


@pytest.fixture
def run(kubelet: FakeKubelet) -> Iterator[Any]:
    started: list[Running] = []

    def start(backend: RecordedNvml, config: dict[str, Any] | None = None) -> Running:
        running = Running(backend, kubelet, parse_config({**FAST_HEALTH, **(config or {})})).start()
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def _allocate(kubelet: FakeKubelet, resource: str, *requests: list[str]) -> pb.AllocateResponse:
    request = pb.AllocateRequest()
    for ids in requests:
        request.container_requests.add(devices_ids=ids)
    return kubelet.stub(resource).Allocate(request, timeout=5)


def _prefer(
    kubelet: FakeKubelet, resource: str, available: list[str], must: list[str], size: int
) -> list[str]:
    request = pb.PreferredAllocationRequest()
    request.container_requests.add(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
    )
    response = kubelet.stub(resource).GetPreferredAllocation(request, timeout=5)
    return list(response.container_responses[0].deviceIDs)


def test_registers_and_streams_the_device_list(run: Any, kubelet: FakeKubelet, h100: RecordedNvml) -> None:
    node = run(h100).node
    req = kubelet.registration()
    assert (req.version, req.endpoint, req.resource_name) == ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu")
    assert req.options.get_preferred_allocation_available and not req.options.pre_start_required
    assert (kubelet.dir / "nvidia-gpu.sock").exists()

    devices = kubelet.next_list("nvidia.com/gpu").devices
    assert [d.ID for d in devices] == [g.uuid for g in node.gpus]
    assert {d.health for d in devices} == {"Healthy"}
    assert [[n.ID for n in d.topology.nodes] for d in devices] == [[0]] * 4 + [[1]] * 4
    assert kubelet.options["nvidia.com/gpu"].get_preferred_allocation_available


def test_allocate_sets_visible_devices_and_cdi_names(
    run: Any, kubelet: FakeKubelet, h100: RecordedNvml
) -> None:
    node = run(
        h100, {"flags": {"plugin": {"deviceListStrategy": ["envvar", "cdi-cri", "cdi-annotations"]}}}
    ).node
    kubelet.next_list("nvidia.com/gpu")
    uuids = [g.uuid for g in node.gpus]

    response = _allocate(kubelet, "nvidia.com/gpu", uuids[:2], [uuids[5]])
    first, second = response.container_responses
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == f"{uuids[0]},{uuids[1]}"
    assert [c.name for c in first.cdi_devices] == [f"k8s.device-plugin.nvidia.com/gpu={u}" for u in uuids[:2]]
    ((key, value),) = first.annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_")
    assert value == ",".join(f"k8s.device-plugin.nvidia.com/gpu={u}" for u in uuids[:2])
    assert second.envs["NVIDIA_VISIBLE_DEVICES"] == uuids[5]

    with pytest.raises(grpc.RpcError) as err:
        _allocate(kubelet, "nvidia.com/gpu", ["GPU-not-here"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device: GPU-not-here" in err.value.details()


def test_index_strategy_and_device_specs(run: Any, kubelet: FakeKubelet, h100: RecordedNvml) -> None:
    node = run(h100, {"flags": {"plugin": {"deviceIDStrategy": "index", "passDeviceSpecs": True}}}).node
    kubelet.next_list("nvidia.com/gpu")
    response = _allocate(kubelet, "nvidia.com/gpu", [node.gpus[3].uuid, node.gpus[6].uuid])
    container = response.container_responses[0]
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == "3,6"
    specs = [(d.container_path, d.host_path, d.permissions) for d in container.devices]
    assert specs[:2] == [("/dev/nvidia3", "/dev/nvidia3", "rw"), ("/dev/nvidia6", "/dev/nvidia6", "rw")]


def test_preferred_allocation_keeps_nvlink_domain_and_numa_node(
    run: Any, kubelet: FakeKubelet, h100: RecordedNvml
) -> None:
    node = run(h100).node
    kubelet.next_list("nvidia.com/gpu")
    u = [g.uuid for g in node.gpus]

    assert _prefer(kubelet, "nvidia.com/gpu", u, [], 4) == u[0:4]
    # Must include GPU 5: the rest comes from its NUMA node.
    assert sorted(_prefer(kubelet, "nvidia.com/gpu", u, [u[5]], 4)) == sorted(u[4:8])
    # With GPUs 1 and 2 taken, four GPUs fit only on NUMA node 1.
    free = [u[0], u[3], u[4], u[5], u[6], u[7]]
    assert _prefer(kubelet, "nvidia.com/gpu", free, [], 4) == u[4:8]
    assert _prefer(kubelet, "nvidia.com/gpu", u, [], 8) == u
    assert _prefer(kubelet, "nvidia.com/gpu", free, [u[7]], 1) == [u[7]]


def test_preferred_allocation_never_exceeds_the_size_with_repeated_must_include(
    run: Any, kubelet: FakeKubelet, h100: RecordedNvml
) -> None:
    node = run(h100).node
    kubelet.next_list("nvidia.com/gpu")
    u = [g.uuid for g in node.gpus]
    answer = _prefer(kubelet, "nvidia.com/gpu", u, [u[2], u[2], u[2]], 2)
    assert answer[0] == u[2] and len(answer) == 2 and len(set(answer)) == 2
    assert _prefer(kubelet, "nvidia.com/gpu", u, [u[0], u[1], u[2]], 2) == [u[0], u[1]]


def _open_stream(stub: Any) -> Any:
    """A ListAndWatch stream whose first device list has arrived, so the server is serving it."""
    call = stub.ListAndWatch(pb.Empty(), timeout=SAFETY_S)
    next(call)
    return call


def test_open_streams_leave_workers_for_allocate(run: Any, kubelet: FakeKubelet, h100: RecordedNvml) -> None:
    running = run(h100)
    kubelet.next_list("nvidia.com/gpu")  # kubelet's own stream is open
    u = [g.uuid for g in running.node.gpus]
    channel = grpc.insecure_channel(f"unix://{kubelet.dir / 'nvidia-gpu.sock'}")
    stub = pb_grpc.DevicePluginStub(channel)
    streams: list[Any] = []
    try:
        # With kubelet's, every stream the plugin takes is open, each holding a server thread.
        streams += [_open_stream(stub) for _ in range(MAX_STREAMS - 1)]
        request = pb.AllocateRequest()
        request.container_requests.add(devices_ids=[u[0]])
        response = stub.Allocate(request, timeout=SAFETY_S)
        assert response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]

        # One more is refused at once rather than queued behind the others.
        with pytest.raises(grpc.RpcError) as err:
            _open_stream(stub)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        # A stream that ends gives its place back.
        streams.pop().cancel()
        streams.append(_retry_until_open(stub))

        # Kubelet's stream still gets every change.
        running.state.mark_unhealthy(u[1], "test")
        assert u[1] not in allocatable(kubelet.next_list("nvidia.com/gpu"))
    finally:
        for call in streams:
            call.cancel()
        channel.close()


def _retry_until_open(stub: Any) -> Any:
    """Opens a stream once the server has seen another one end (it learns of that asynchronously)."""
    for _ in range(SAFETY_S * 20):
        try:
            return _open_stream(stub)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
        time.sleep(0.05)
    raise AssertionError("no ListAndWatch slot came free after a stream ended")


def test_reregisters_after_kubelet_restart(run: Any, kubelet: FakeKubelet, h100: RecordedNvml) -> None:
    running = run(h100)
    kubelet.registration()
    kubelet.next_list("nvidia.com/gpu")

    kubelet.restart()

    again = kubelet.registration()
    assert (again.endpoint, again.resource_name) == ("nvidia-gpu.sock", "nvidia.com/gpu")
    assert len(kubelet.next_list("nvidia.com/gpu").devices) == 8
    assert (kubelet.dir / "nvidia-gpu.sock").exists()
    assert running.manager.registrations == 2


def test_registers_when_kubelet_starts_late(run: Any, short_dir: Path, h100: RecordedNvml) -> None:
    late = FakeKubelet(short_dir / "late")
    late.dir.mkdir()
    running = Running(h100, late, parse_config(FAST_HEALTH))
    running.start()
    try:
        assert running.manager.registrations == 0
        late.start()
        assert late.registration().resource_name == "nvidia.com/gpu"
        assert len(late.next_list("nvidia.com/gpu").devices) == 8
    finally:
        running.stop()
        late.stop()


def test_injected_xid_removes_gpu_from_allocatable_until_reset(
    run: Any, kubelet: FakeKubelet, h100: RecordedNvml
) -> None:
    node = run(h100).node
    u = [g.uuid for g in node.gpus]
    assert len(allocatable(kubelet.next_list("nvidia.com/gpu"))) == 8

    h100.inject_xid(u[3], 13)  # graphics exception: the application's fault, ignored
    h100.inject_xid(u[3], 79)  # fell off the bus
    update = kubelet.next_list("nvidia.com/gpu")
    assert allocatable(update) == [x for x in u if x != u[3]]
    assert len(update.devices) == 8  # capacity still counts it
    assert [d.health for d in update.devices if u[3] == d.ID] == ["Unhealthy"]

    with pytest.raises(grpc.RpcError) as err:
        _allocate(kubelet, "nvidia.com/gpu", [u[3]])
    assert "unhealthy" in err.value.details()

    h100.reset_gpu(u[3])
    assert len(allocatable(kubelet.next_list("nvidia.com/gpu"))) == 8


def test_double_bit_ecc_marks_unhealthy_and_recovery_can_be_disabled(
    run: Any, kubelet: FakeKubelet, h100: RecordedNvml
) -> None:
    running = run(h100, {"health": {"waitTimeoutMs": 50, "recoverAfterReset": False}})
    u = [g.uuid for g in running.node.gpus]
    kubelet.next_list("nvidia.com/gpu")

    h100.inject_ecc(u[6])
    assert u[6] not in allocatable(kubelet.next_list("nvidia.com/gpu"))
    h100.reset_gpu(u[6])
    running.monitor.check_recovery()
    assert not running.state.is_healthy(u[6])


def test_time_slicing_replicas_rename_and_request_limit(
    run: Any, kubelet: FakeKubelet, l4: RecordedNvml
) -> None:
    sharing = {
        "timeSlicing": {
            "renameByDefault": True,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
        }
    }
    node = run(l4, {"sharing": sharing}).node
    req = kubelet.registration()
    assert (req.resource_name, req.endpoint) == ("nvidia.com/gpu.shared", "nvidia-gpu.shared.sock")
    ids = [d.ID for d in kubelet.next_list("nvidia.com/gpu.shared").devices]
    assert ids == [f"{g.uuid}::{i}" for g in node.gpus for i in range(4)]

    response = _allocate(kubelet, "nvidia.com/gpu.shared", [f"{node.gpus[2].uuid}::3"])
    assert response.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == node.gpus[2].uuid
    with pytest.raises(grpc.RpcError) as err:
        _allocate(kubelet, "nvidia.com/gpu.shared", ids[:2])
    assert "maximum request size for shared resources is 1" in err.value.details()

    # distributed: three replicas land on three different GPUs
    chosen = _prefer(kubelet, "nvidia.com/gpu.shared", ids, [], 3)
    assert len({c.split("::")[0] for c in chosen}) == 3


def test_mps_sets_pipe_directory_and_limits(run: Any, kubelet: FakeKubelet, l4: RecordedNvml) -> None:
    sharing = {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}
    node = run(l4, {"sharing": sharing}).node
    ids = [d.ID for d in kubelet.next_list("nvidia.com/gpu").devices]
    assert len(ids) == 8
    container = _allocate(kubelet, "nvidia.com/gpu", [ids[0]]).container_responses[0]
    assert container.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert container.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert container.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={node.gpus[0].memory_mib // 2}M"
    mounts = {(m.container_path, m.host_path) for m in container.mounts}
    assert mounts == {
        ("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe"),
        ("/dev/shm", "/run/nvidia/mps/shm"),
    }
    # failRequestsGreaterThanOne defaults to true for MPS
    with pytest.raises(grpc.RpcError):
        _allocate(kubelet, "nvidia.com/gpu", ids[:2])


def test_mixed_mig_advertises_a_resource_per_profile(
    run: Any, kubelet: FakeKubelet, a100_mig: RecordedNvml
) -> None:
    node = run(a100_mig, {"flags": {"migStrategy": "mixed"}}).node
    registered = {kubelet.registration().resource_name for _ in range(3)}
    assert registered == {"nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}
    one_g = kubelet.next_list("nvidia.com/mig-1g.10gb")
    assert len(one_g.devices) == 4 * 2 + 2 * 7
    assert len(kubelet.next_list("nvidia.com/mig-3g.40gb").devices) == 4 + 2 * 2

    # An XID that names a GPU instance takes down only that MIG device.
    gpu0 = node.gpus[0]
    victim = next(m for m in gpu0.mig_devices if m.profile == "1g.10gb")
    a100_mig.inject_xid(gpu0.uuid, 94, gi_id=victim.gi_id, ci_id=victim.ci_id)
    update = kubelet.next_list("nvidia.com/mig-1g.10gb")
    assert [d.ID for d in update.devices if d.health == "Unhealthy"] == [victim.uuid]

    container = _allocate(
        kubelet, "nvidia.com/mig-3g.40gb", [node.gpus[6].mig_devices[0].uuid]
    ).container_responses[0]
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == node.gpus[6].mig_devices[0].uuid
