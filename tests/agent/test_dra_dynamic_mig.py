"""Dynamic MIG in the agent's DRA driver, through the stand-in kubelet: every placement of a MIG-enabled
GPU published; the allocated instance created through NVML at prepare (its caps nodes in the claim's
CDI spec, recorded in the checkpoint), destroyed at unprepare; a taken placement refused for that claim
alone; a restart that neither leaks nor creates twice, and a reboot that creates again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.agent.dra.driver import DraDriver
from gpufleet.agent.dra.migcaps import MigCaps
from gpufleet.agent.dra.server import DraPlugin
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import RealNvml, RecordedNvml
from gpufleet.agent.nvml.migctl import NvmlMigControl
from gpufleet.api.dra import ResourceClaim
from gpufleet.api.dra_devices import ResourceSliceSpec
from gpufleet.cli.main import app

from .fakemig import FakeMigPynvml
from .test_dra_kubelet import DRIVER, NODE, StandInKubelet, allocated

CAPS_MAJOR = 508


class DynamicNode:
    """The agent's DRA side with dynamic MIG over a fake NVML whose MIG instances can be made."""

    def __init__(self, root: Path, nvml: FakeMigPynvml) -> None:
        self.root = root
        self.nvml = nvml
        self.claims: dict[tuple[str, str], ResourceClaim] = {}
        self.published: list[list[ResourceSliceSpec]] = []
        self.plugin: DraPlugin | None = None
        # the driver's capability table: GPU 0's GI g has minor 10g, its CI 0 minor 10g + 1
        lines = [f"gpu0/gi{g}/access {10 * g}\ngpu0/gi{g}/ci0/access {10 * g + 1}" for g in range(1, 9)]
        (root / "mig-minors").write_text("\n".join(lines) + "\n")
        (root / "devices").write_text(f"Character devices:\n{CAPS_MAJOR} nvidia-caps\n")

    def publish(self, node_name: str, wanted: Any) -> None:
        self.published.append(wanted(len(self.published) + 1))

    def start(self) -> str:
        """Starts the agent and registers it with a stand-in kubelet; the DRA endpoint."""
        driver = DraDriver(
            self.nvml.node,
            node_name=NODE,
            health=HealthState(),
            read_claim=lambda ns, name: self.claims.get((ns, name)),
            publish=self.publish,
            state_dir=self.root / "plugins" / DRIVER,
            cdi_dir=self.root / "cdi",
            mig_caps=MigCaps(mig_minors=self.root / "mig-minors", proc_devices=self.root / "devices"),
            mig_control=RealNvml(self.nvml).mig_control(),
        )
        self.plugin = DraPlugin(
            driver, plugins_dir=self.root / "plugins", registry_dir=self.root / "registry"
        )
        self.plugin.start()
        return StandInKubelet(self.root / "registry").register().endpoint

    def stop(self) -> None:
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None

    def checkpoint(self) -> dict[str, Any]:
        claims: dict[str, Any] = json.loads((self.root / "plugins" / DRIVER / "checkpoint.json").read_text())[
            "claims"
        ]
        return claims

    def spec(self, uid: str) -> dict[str, Any]:
        path = self.root / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json"
        return dict(json.loads(path.read_text()))


@pytest.fixture
def dyn(short_dir: Path, a100_mig: RecordedNvml) -> Iterator[DynamicNode]:
    node = DynamicNode(short_dir, FakeMigPynvml(a100_mig.discover()))
    yield node
    node.stop()


def call(endpoint: str, method: str, *claims: tuple[str, str, str]) -> dict[str, Any]:
    answer = StandInKubelet(Path("/")).call(endpoint, method, *claims)
    return dict(answer.claims)


def caps(spec: dict[str, Any], device: str) -> list[str]:
    (found,) = [d for d in spec["devices"] if d["name"].endswith(device)]
    return [n["path"] for n in found["containerEdits"]["deviceNodes"]]


def test_dra_dynamic_mig_publishes_every_placement_and_owns_the_layout(dyn: DynamicNode) -> None:
    assert dyn.nvml.instances(6) == [("3g.40gb", 0, 4), ("3g.40gb", 4, 4)]  # mig-parted's layout
    dyn.start()
    # the driver owns the MIG layout: instances no prepared claim holds are destroyed at start
    assert all(dyn.nvml.instances(g.index) == [] for g in dyn.nvml.node.gpus)
    devices = {d.name: d for s in dyn.published[0] for d in s.devices}
    gpu0 = {n for n in devices if n.startswith("gpu-0-mig-")}
    # A100-80GB: 7 + 7 (1g.10gb+me) + 4 + 3 + 2 + 1 + 1 placements
    assert len(gpu0) == 25 and {"gpu-0-mig-0-0-8", "gpu-0-mig-19-6-1", "gpu-0-mig-9-4-4"} <= gpu0
    # a placement not made yet has no UUID to publish; its parent's UUID is there
    attributes = devices["gpu-0-mig-9-4-4"].attributes
    assert "uuid" not in attributes and attributes["parentUUID"].string == dyn.nvml.node.gpus[0].uuid


def test_dra_dynamic_mig_prepare_creates_the_instance_and_unprepare_destroys_it(dyn: DynamicNode) -> None:
    endpoint = dyn.start()
    dyn.claims["team-a", "small"] = allocated("small", "uid-1", "gpu-0-mig-9-4-4", "gpu-0-mig-19-1-1")
    answer = call(endpoint, "NodePrepareResources", ("team-a", "uid-1", "small"))
    assert answer["uid-1"].error == ""
    assert dyn.nvml.instances(0) == [("1g.10gb", 1, 1), ("3g.40gb", 4, 4)]
    made = {m.placement_start: m for m in dyn.nvml.node.gpus[0].mig_devices}
    # the claim's CDI spec names the new instances' GPU- and compute-instance capability nodes
    spec = dyn.spec("uid-1")
    gi3, gi1 = made[4].gi_id, made[1].gi_id
    assert caps(spec, "gpu-0-mig-9-4-4") == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{10 * gi3}",
        f"/dev/nvidia-caps/nvidia-cap{10 * gi3 + 1}",
    ]
    assert caps(spec, "gpu-0-mig-19-1-1")[1] == f"/dev/nvidia-caps/nvidia-cap{10 * gi1}"
    # NVML's discovery (the device plugin's, the exporter's) sees the new instances with their profiles
    found = RealNvml(dyn.nvml).discover().gpus[0].mig_devices
    assert sorted((m.profile, m.placement_start, m.uuid) for m in found) == [
        ("1g.10gb", 1, made[1].uuid),
        ("3g.40gb", 4, made[4].uuid),
    ]
    recorded = dyn.checkpoint()["uid-1"]["mig"]
    assert {(m["device"], m["uuid"]) for m in recorded} == {
        ("gpu-0-mig-9-4-4", made[4].uuid),
        ("gpu-0-mig-19-1-1", made[1].uuid),
    }
    # the kubelet asks again: answered from the checkpoint, nothing created twice
    assert call(endpoint, "NodePrepareResources", ("team-a", "uid-1", "small"))["uid-1"] == answer["uid-1"]
    assert len(dyn.nvml.created) == 2

    done = call(endpoint, "NodeUnprepareResources", ("team-a", "uid-1", "small"))
    assert done["uid-1"].error == ""
    assert dyn.nvml.instances(0) == [] and dyn.checkpoint() == {}


def test_dra_dynamic_mig_a_taken_placement_fails_that_claim_alone(dyn: DynamicNode) -> None:
    endpoint = dyn.start()
    # another tool made a 4g.40gb at slices 0-3 after the agent started
    control = NvmlMigControl(dyn.nvml)
    other = control.create(dyn.nvml.node.gpus[0].uuid, 5, 0, 4, 4)
    dyn.claims["team-a", "ok"] = allocated("ok", "uid-ok", "gpu-0-mig-9-4-4")
    # the second device's placement (2g.20gb at 2-3) overlaps the other tool's instance
    dyn.claims["team-a", "clash"] = allocated("clash", "uid-c", "gpu-1-mig-19-6-1", "gpu-0-mig-14-2-2")
    answer = call(endpoint, "NodePrepareResources", ("team-a", "uid-ok", "ok"), ("team-a", "uid-c", "clash"))
    assert answer["uid-ok"].error == ""
    error = answer["uid-c"].error
    assert "team-a/clash" in error and "gpu-0-mig-14-2-2" in error
    assert f"already taken by MIG device {other.uuid}" in error
    # nothing of the refused claim is left: its first instance (1g.10gb on GPU 1) was destroyed again
    assert dyn.nvml.instances(0) == [("3g.40gb", 4, 4), ("4g.40gb", 0, 4)]
    assert dyn.nvml.instances(1) == [] and dyn.nvml.created[-1] == (1, 19, 6)
    assert set(dyn.checkpoint()) == {"uid-ok"}


def test_dra_dynamic_mig_a_restart_neither_leaks_nor_creates_twice(dyn: DynamicNode) -> None:
    endpoint = dyn.start()
    dyn.claims["team-a", "c"] = allocated("c", "uid-1", "gpu-0-mig-14-0-2")
    first = call(endpoint, "NodePrepareResources", ("team-a", "uid-1", "c"))["uid-1"]
    uuid = dyn.nvml.node.gpus[0].mig_devices[0].uuid
    dyn.stop()
    # a crash between creating an instance and recording it: an instance no claim holds
    NvmlMigControl(dyn.nvml).create(dyn.nvml.node.gpus[1].uuid, 0, 0, 8, 7)
    endpoint = dyn.start()
    assert dyn.nvml.instances(1) == []  # the leaked one is destroyed
    assert [m.uuid for m in dyn.nvml.node.gpus[0].mig_devices] == [uuid]  # the claim's is kept
    assert call(endpoint, "NodePrepareResources", ("team-a", "uid-1", "c"))["uid-1"] == first
    assert len(dyn.nvml.created) == 2  # the claim's and the leaked one: nothing created again

    # a reboot: every instance and the CDI dir are gone; the claim's instance is made again at its
    # placement and its spec written again with the new instance's capability nodes
    dyn.stop()
    dyn.nvml.reboot()
    for spec in (dyn.root / "cdi").iterdir():
        spec.unlink()
    endpoint = dyn.start()
    assert dyn.nvml.instances(0) == [("2g.20gb", 0, 2)]
    again = dyn.nvml.node.gpus[0].mig_devices[0]
    assert again.uuid != uuid and dyn.checkpoint()["uid-1"]["mig"][0]["uuid"] == again.uuid
    assert call(endpoint, "NodePrepareResources", ("team-a", "uid-1", "c"))["uid-1"] == first
    assert caps(dyn.spec("uid-1"), "gpu-0-mig-14-0-2")[1] == f"/dev/nvidia-caps/nvidia-cap{10 * again.gi_id}"
    assert call(endpoint, "NodeUnprepareResources", ("team-a", "uid-1", "c"))["uid-1"].error == ""
    assert dyn.nvml.instances(0) == []


def test_dra_dynamic_mig_an_instance_in_use_is_left_at_start_and_its_slices_refused(dyn: DynamicNode) -> None:
    busy = next(m for m in dyn.nvml.node.gpus[7].mig_devices if m.placement_start == 4)
    dyn.nvml.busy.add(busy.uuid)  # mig-parted's 3g.40gb at slices 4-7 still runs a process
    endpoint = dyn.start()
    assert dyn.nvml.instances(7) == [("3g.40gb", 4, 4)] and dyn.nvml.instances(6) == []
    dyn.claims["team-a", "c"] = allocated("c", "uid-1", "gpu-7-mig-19-5-1")
    error = call(endpoint, "NodePrepareResources", ("team-a", "uid-1", "c"))["uid-1"].error
    assert f"already taken by MIG device {busy.uuid}" in error


def test_dra_dynamic_mig_needs_the_node_s_nvml_not_a_recorded_profile() -> None:
    result = CliRunner().invoke(
        app,
        ["agent", "--dra", "--dra-dynamic-mig", "--profile", "a100-80gb-mig", "--node-name", "n1"],
    )
    assert result.exit_code != 0
    assert "--dra-dynamic-mig" in result.output and "recorded --profile" in result.output
