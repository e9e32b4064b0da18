"""The DRA driver against a stand-in kubelet of our own that speaks the published protos over real unix
sockets: plugin registration (GetInfo, NotifyRegistrationStatus), then NodePrepareResources and
NodeUnprepareResources of a claim allocated on a recorded (fake) NVML node, checking the CDI spec the
container runtime would read; idempotence, a restart in between, and the refusals a user can cause."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpufleet.agent.dra._generated import dra_v1_pb2, dra_v1beta1_pb2
from gpufleet.agent.dra._generated import dra_v1_pb2_grpc as v1_grpc
from gpufleet.agent.dra._generated import dra_v1beta1_pb2_grpc as v1beta1_grpc
from gpufleet.agent.dra._generated import pluginregistration_pb2 as regpb
from gpufleet.agent.dra._generated import pluginregistration_pb2_grpc as reg_grpc
from gpufleet.agent.dra.checkpoint import Checkpoint
from gpufleet.agent.dra.driver import DraDriver
from gpufleet.agent.dra.migcaps import MigCaps
from gpufleet.agent.dra.server import DraPlugin
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import NodeInfo, RecordedNvml
from gpufleet.api.dra import ResourceClaim
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.api.errors import ValidationError

NODE = "a100-mig-0"
DRIVER = "gpu.nvidia.com"


class StandInKubelet:
    """What the kubelet's plugin watcher and DRA manager do with a DRA plugin, over gRPC."""

    def __init__(self, registry: Path) -> None:
        self.registry = registry

    def register(self, timeout: float = 10.0) -> regpb.PluginInfo:
        """Finds the plugin's socket in the registry, asks who it is and tells it that it is registered."""
        deadline = time.monotonic() + timeout
        while not (sockets := sorted(self.registry.glob("*.sock"))):
            assert time.monotonic() < deadline, f"no plugin socket in {self.registry}"
            time.sleep(0.05)
        (socket,) = sockets
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub: Any = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(regpb.InfoRequest(), timeout=5)
            stub.NotifyRegistrationStatus(regpb.RegistrationStatus(plugin_registered=True), timeout=5)
        return info

    def call(self, endpoint: str, method: str, *claims: tuple[str, str, str], version: str = "v1") -> Any:
        pb, pb_grpc = (dra_v1_pb2, v1_grpc) if version == "v1" else (dra_v1beta1_pb2, v1beta1_grpc)
        request_type = getattr(pb, f"{method}Request")
        request = request_type(
            claims=[pb.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        )
        with grpc.insecure_channel(f"unix://{endpoint}") as channel:
            return getattr(pb_grpc.DRAPluginStub(channel), method)(request, timeout=5)


def allocated(name: str, uid: str, *devices: str, pool: str = NODE) -> ResourceClaim:
    results = [{"request": "gpus", "driver": DRIVER, "pool": pool, "device": d} for d in devices]
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "team-a", "uid": uid},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


class Node:
    """The agent's DRA side on one recorded node, with an in-memory API server's claims and slices."""

    def __init__(self, root: Path, node: NodeInfo) -> None:
        self.root = root
        self.node = node
        self.claims: dict[tuple[str, str], ResourceClaim] = {}
        self.published: list[list[ResourceSliceSpec]] = []
        self.health = HealthState()
        self.plugin: DraPlugin | None = None

    def publish(self, node_name: str, wanted: Any) -> None:
        self.published.append(wanted(len(self.published) + 1))

    def start(self) -> DraPlugin:
        driver = DraDriver(
            self.node,
            node_name=NODE,
            health=self.health,
            read_claim=lambda ns, name: self.claims.get((ns, name)),
            publish=self.publish,
            state_dir=self.root / "plugins" / DRIVER,
            cdi_dir=self.root / "cdi",
            # this host's /proc is not the recorded node's: no mig-minors, so a MIG instance gets its
            # parent's node only (tests/agent/test_dra_cdi.py gives it a table)
            mig_caps=MigCaps(mig_minors=self.root / "no-mig-minors"),
        )
        self.plugin = DraPlugin(
            driver, plugins_dir=self.root / "plugins", registry_dir=self.root / "registry"
        )
        self.plugin.start()
        return self.plugin

    def stop(self) -> None:
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None


@pytest.fixture
def node(short_dir: Path, a100_mig: RecordedNvml) -> Iterator[Node]:
    fake = Node(short_dir, a100_mig.discover())
    yield fake
    fake.stop()


def test_dra_kubelet_registers_the_driver_and_prepares_a_claim_into_a_cdi_spec(node: Node) -> None:
    plugin = node.start()
    kubelet = StandInKubelet(node.root / "registry")
    info = kubelet.register()
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert plugin.registered.wait(5)
    gpu, mig_gpu = node.node.gpus[2], node.node.gpus[0]
    node.claims["team-a", "train"] = allocated("train", "uid-1", "gpu-2", "gpu-0-mig-9-4-4")

    answer = kubelet.call(info.endpoint, "NodePrepareResources", ("team-a", "uid-1", "train"))
    prepared = answer.claims["uid-1"]
    assert prepared.error == ""
    assert [(d.device_name, d.pool_name, list(d.request_names)) for d in prepared.devices] == [
        ("gpu-2", NODE, ["gpus"]),
        ("gpu-0-mig-9-4-4", NODE, ["gpus"]),
    ]
    ids = [i for d in prepared.devices for i in d.cdi_device_ids]
    assert ids == ["k8s.gpu.nvidia.com/claim=uid-1-gpu-2", "k8s.gpu.nvidia.com/claim=uid-1-gpu-0-mig-9-4-4"]
    spec_file = node.root / "cdi" / "k8s.gpu.nvidia.com-claim_uid-1.json"
    spec = json.loads(spec_file.read_text())
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim" and spec["cdiVersion"]
    # every id the kubelet got names a device of the spec: the runtime can resolve it
    assert {f"{spec['kind']}={d['name']}" for d in spec["devices"]} == set(ids)
    nodes = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert nodes == {
        "uid-1-gpu-2": [{"path": gpu.device_path}],
        "uid-1-gpu-0-mig-9-4-4": [{"path": mig_gpu.device_path}],  # a MIG instance: its parent's node
    }
    # the same in every claim's spec, so a second claim in the container cannot hide this one's devices
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=none"]
    assert {"path": "/dev/nvidiactl"} in spec["containerEdits"]["deviceNodes"]

    # the kubelet asks again (it retries, and asks again after its own restart): the same answer
    del node.claims["team-a", "train"]  # answered from the checkpoint, not from the API server
    again = kubelet.call(info.endpoint, "NodePrepareResources", ("team-a", "uid-1", "train"))
    assert again.claims["uid-1"] == prepared
    # a reboot empties the CDI dir (a tmpfs) but not the checkpoint: prepare writes the spec again
    spec_file.unlink()
    rebooted = kubelet.call(info.endpoint, "NodePrepareResources", ("team-a", "uid-1", "train"))
    assert rebooted.claims["uid-1"] == prepared and json.loads(spec_file.read_text()) == spec

    # the agent restarts: the checkpoint still knows the claim, so unprepare removes its spec
    node.stop()
    node.start()
    info = StandInKubelet(node.root / "registry").register()
    done = kubelet.call(info.endpoint, "NodeUnprepareResources", ("team-a", "uid-1", "train"))
    assert done.claims["uid-1"].error == "" and not spec_file.exists()
    # unprepare of a claim already unprepared (or never prepared here) succeeds
    twice = kubelet.call(info.endpoint, "NodeUnprepareResources", ("team-a", "uid-1", "train"))
    assert twice.claims["uid-1"].error == ""
    checkpoint = json.loads((node.root / "plugins" / DRIVER / "checkpoint.json").read_text())
    assert checkpoint["claims"] == {}


def test_dra_kubelet_v1beta1_is_served_on_the_same_socket(node: Node) -> None:
    node.start()
    kubelet = StandInKubelet(node.root / "registry")
    info = kubelet.register()
    node.claims["team-a", "c"] = allocated("c", "uid-2", "gpu-5")
    answer = kubelet.call(info.endpoint, "NodePrepareResources", ("team-a", "uid-2", "c"), version="v1beta1")
    assert [d.device_name for d in answer.claims["uid-2"].devices] == ["gpu-5"]
    gone = kubelet.call(info.endpoint, "NodeUnprepareResources", ("team-a", "uid-2", "c"), version="v1beta1")
    assert gone.claims["uid-2"].error == ""
    assert not (node.root / "cdi" / "k8s.gpu.nvidia.com-claim_uid-2.json").exists()


def test_dra_kubelet_refusals_name_the_claim_and_leave_the_others_prepared(node: Node) -> None:
    node.start()
    kubelet = StandInKubelet(node.root / "registry")
    info = kubelet.register()
    node.claims["team-a", "ok"] = allocated("ok", "uid-ok", "gpu-3")
    node.claims["team-a", "elsewhere"] = allocated("elsewhere", "uid-x", "gpu-1", pool="other-node")
    node.claims["team-a", "sick"] = allocated("sick", "uid-s", "gpu-4")
    node.claims["team-a", "unknown"] = allocated("unknown", "uid-u", "gpu-9")
    node.claims["team-a", "pending"] = ResourceClaim.model_validate(
        {"metadata": {"name": "pending", "namespace": "team-a", "uid": "uid-p"}, "spec": {}}
    )
    node.health.mark_unhealthy(node.node.gpus[4].uuid, "XID 79")
    answer = kubelet.call(
        info.endpoint,
        "NodePrepareResources",
        ("team-a", "uid-ok", "ok"),
        ("team-a", "uid-x", "elsewhere"),
        ("team-a", "uid-s", "sick"),
        ("team-a", "uid-u", "unknown"),
        ("team-a", "uid-p", "pending"),
        ("team-a", "uid-gone", "gone"),
        ("team-a", "uid-old", "ok"),  # a claim recreated under the same name
    )
    errors = {uid: r.error for uid, r in answer.claims.items()}
    assert errors["uid-ok"] == ""
    assert "team-a/elsewhere" in errors["uid-x"] and "pool other-node" in errors["uid-x"]
    assert "gpu-4" in errors["uid-s"] and "unhealthy" in errors["uid-s"]
    assert "gpu-9 is not a device of node" in errors["uid-u"]
    assert "status.allocation is not set" in errors["uid-p"]
    assert "not found" in errors["uid-gone"]
    assert "has UID uid-ok" in errors["uid-old"]
    assert sorted(p.name for p in (node.root / "cdi").iterdir()) == ["k8s.gpu.nvidia.com-claim_uid-ok.json"]


def test_dra_kubelet_slices_follow_gpu_health(node: Node) -> None:
    node.start()
    deadline = time.monotonic() + 5

    def wait_for(count: int) -> list[ResourceSliceSpec]:
        while len(node.published) < count:
            assert time.monotonic() < deadline, f"{len(node.published)} publications, not {count}"
            time.sleep(0.02)
        return node.published[count - 1]

    def names(specs: list[ResourceSliceSpec]) -> set[str]:
        return {d.name for s in specs for d in s.devices}

    assert "gpu-1" in names(wait_for(1))
    node.health.mark_unhealthy(node.node.gpus[1].uuid, "XID 79")
    assert "gpu-1" not in names(wait_for(2))
    node.health.mark_healthy(node.node.gpus[1].uuid)
    assert "gpu-1" in names(wait_for(3))


def test_dra_kubelet_slices_are_published_again_every_resync(node: Node) -> None:
    """A slice someone deleted comes back without a health change: the publisher is called again every
    resync interval (and writes only what changed)."""
    plugin = node.start()
    plugin.driver.stop()
    plugin.driver.start(resync_seconds=0.05)
    deadline = time.monotonic() + 5
    while len(node.published) < 4:
        assert time.monotonic() < deadline, f"published {len(node.published)} times in 5 s"
        time.sleep(0.02)
    assert node.health.version == 0


def test_dra_an_unreadable_checkpoint_is_refused_naming_the_file(short_dir: Path) -> None:
    path = short_dir / "checkpoint.json"
    path.write_text('{"version": 1, "claims": {"uid-1": {"namespace": "a"}}}')
    with pytest.raises(ValidationError, match=r"checkpoint.json.*field claims.*unreadable checkpoint"):
        Checkpoint(path)
    path.write_text('{"version": 7, "claims": {}}')
    with pytest.raises(ValidationError, match=r"field version: version 7 is not 1"):
        Checkpoint(path)
