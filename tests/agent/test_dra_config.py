"""Opaque driver config in claims (NVIDIA's resource.nvidia.com/v1beta1 GpuConfig and MigDeviceConfig):
validated at prepare with an error naming the claim and the field, the claim's over the class's, and a
TimeSlicing config applied to the claim's GPUs (nvidia-smi) and undone at unprepare."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet.agent.dra.driver import ClaimRef, DraDriver, PrepareError
from gpufleet.agent.dra.migcaps import MigCaps
from gpufleet.agent.dra.timeslice import NvidiaSmi, TimeSliceError
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import NodeInfo, RecordedNvml
from gpufleet.api.dra import ResourceClaim

NODE = "a100-mig-0"
DRIVER = "gpu.nvidia.com"
API = "resource.nvidia.com/v1beta1"


class Recorder:
    """A TimeSlicer that records what it was asked to set."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], int]] = []

    def set_time_slice(self, uuids: Sequence[str], interval: int) -> None:
        self.calls.append((tuple(uuids), interval))


def gpu_config(strategy: str, **more: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": strategy, **more}}


def config(parameters: Any, *, source: str = "FromClaim", requests: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {"driver": DRIVER, "parameters": parameters},
    }


def claim(name: str, results: Sequence[tuple[str, str]], configs: Sequence[dict[str, Any]]) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
            "spec": {},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": r, "driver": DRIVER, "pool": NODE, "device": d} for r, d in results
                        ],
                        "config": list(configs),
                    }
                }
            },
        }
    )


@pytest.fixture
def node(a100_mig: RecordedNvml) -> NodeInfo:
    return a100_mig.discover()


class Driver:
    def __init__(self, node: NodeInfo, root: Path) -> None:
        self.claims: dict[str, ResourceClaim] = {}
        self.slicer = Recorder()
        self.root = root
        self.driver = DraDriver(
            node,
            node_name=NODE,
            health=HealthState(),
            read_claim=lambda ns, name: self.claims.get(name),
            publish=None,
            state_dir=root / "state",
            cdi_dir=root / "cdi",
            mig_caps=MigCaps(mig_minors=root / "no-mig-minors"),
            time_slicer=self.slicer,
        )

    def prepare(self, c: ResourceClaim) -> None:
        self.claims[c.metadata.name] = c
        self.driver.prepare(ClaimRef("team-a", f"uid-{c.metadata.name}", c.metadata.name))

    def unprepare(self, name: str) -> None:
        self.driver.unprepare(ClaimRef("team-a", f"uid-{name}", name))


@pytest.fixture
def drv(node: NodeInfo, tmp_path: Path) -> Driver:
    return Driver(node, tmp_path)


def test_dra_time_slicing_config_sets_the_claims_gpus_and_unprepare_restores_default(
    drv: Driver, node: NodeInfo
) -> None:
    long = gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Long"})
    short = gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Short"})
    drv.prepare(
        claim(
            "ts",
            [("gpus", "gpu-2"), ("gpus", "gpu-3"), ("mig", "gpu-0-mig-9-4-4")],
            # the class says Short for every GPU; the claim's own config, later in precedence, says Long
            [config(short, source="FromClass"), config(long, requests=["gpus"])],
        )
    )
    uuids = (node.gpus[2].uuid, node.gpus[3].uuid)
    assert drv.slicer.calls == [(uuids, 3)]  # the MIG device takes no time slice
    spec = json.loads((drv.root / "cdi" / "k8s.gpu.nvidia.com-claim_uid-ts.json").read_text())
    assert spec["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=none"
    ]  # a GPU setting, not the container's
    # a reboot: the CDI dir (a tmpfs) is empty and the GPUs' time slices reset; prepare sets them again
    (drv.root / "cdi" / "k8s.gpu.nvidia.com-claim_uid-ts.json").unlink()
    drv.prepare(drv.claims["ts"])
    assert drv.slicer.calls == [(uuids, 3), (uuids, 3)]
    drv.unprepare("ts")
    assert drv.slicer.calls[-1] == (uuids, 0)  # back to Default
    # the agent restarted in between: the checkpoint remembers which GPUs to set back
    drv.prepare(claim("again", [("gpus", "gpu-5")], [config(gpu_config("TimeSlicing"))]))
    assert drv.slicer.calls[-1] == ((node.gpus[5].uuid,), 0)  # no interval given: Default
    restarted = Driver(node, drv.root)
    restarted.unprepare("again")
    assert restarted.slicer.calls == [((node.gpus[5].uuid,), 0)]


def test_dra_configs_of_other_drivers_and_without_sharing_change_nothing(drv: Driver) -> None:
    other = {
        "source": "FromClaim",
        "requests": [],
        "opaque": {"driver": "x.example.com", "parameters": {"kind": "NotOurs"}},
    }
    plain = {"apiVersion": API, "kind": "GpuConfig"}
    drv.prepare(claim("plain", [("gpus", "gpu-1")], [other, config(plain)]))
    assert drv.slicer.calls == []


@pytest.mark.parametrize(
    ("configs", "results", "message"),
    [
        (
            [config(gpu_config("Spatial"))],
            [("gpus", "gpu-1")],
            r"team-a/bad .*config\[0\]\.opaque\.parameters\.sharing\.strategy: "
            r"Input should be 'TimeSlicing' or 'MPS'",
        ),
        (
            [config(gpu_config("TimeSlicing", timeSlicingConfig={"intervall": "Long"}))],
            [("gpus", "gpu-1")],
            r"config\[0\]\.opaque\.parameters\.sharing\.timeSlicingConfig\.intervall: Extra inputs",
        ),
        (
            [config(gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Forever"}))],
            [("gpus", "gpu-1")],
            r"sharing\.timeSlicingConfig\.interval: Input should be 'Default', 'Short', 'Medium' or 'Long'",
        ),
        (
            [config(gpu_config("TimeSlicing", mpsConfig={}))],
            [("gpus", "gpu-1")],
            r"parameters\.sharing: Value error, mpsConfig cannot be used with the TimeSlicing strategy",
        ),
        (
            [config({"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"})],
            [("gpus", "gpu-1")],
            r"parameters\.apiVersion: Input should be 'resource.nvidia.com/v1beta1'",
        ),
        (
            [config({"apiVersion": API, "kind": "VfioDeviceConfig"})],
            [("gpus", "gpu-1")],
            r"parameters\.kind: 'VfioDeviceConfig' is not GpuConfig or MigDeviceConfig",
        ),
        (
            [
                config(gpu_config("TimeSlicing"), source="FromClass"),
                config(gpu_config("TimeSlicing"), requests=["mig"]),
            ],
            [("gpus", "gpu-1"), ("mig", "gpu-0-mig-9-4-4")],
            r"config\[1\]: a GpuConfig cannot apply to device gpu-0-mig-9-4-4 \(request mig\), a MIG device",
        ),
        (
            [config(gpu_config("MPS", mpsConfig={"defaultActiveThreadPercentage": 50}))],
            [("gpus", "gpu-1")],
            r"config\[0\]\.opaque\.parameters\.sharing\.strategy: MPS is not served by gpufleet's DRA driver",
        ),
        (
            [config(gpu_config("MPS", mpsConfig={"defaultActiveThreadPercentage": 150}))],
            [("gpus", "gpu-1")],
            r"sharing\.mpsConfig\.defaultActiveThreadPercentage: Input should be less than or equal to 100",
        ),
        (
            [{"source": "FromClaim", "requests": [], "opaque": None}],
            [("gpus", "gpu-1")],
            r"config\[0\]: only opaque parameters are supported by gpu.nvidia.com",
        ),
    ],
)
def test_dra_a_bad_config_refuses_the_claim_naming_it_and_the_field(
    drv: Driver, configs: list[dict[str, Any]], results: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(PrepareError, match=message):
        drv.prepare(claim("bad", results, configs))
    assert drv.slicer.calls == [] and not (drv.root / "cdi").exists()
    assert drv.driver.checkpoint.get("uid-bad") is None


def test_dra_nvidia_smi_sets_compute_mode_and_time_slice_or_says_what_failed(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\n'
        'case "$*" in *GPU-bad*) echo "Insufficient Permissions"; exit 4;; esac\n'
    )
    smi.chmod(0o755)
    NvidiaSmi(str(smi)).set_time_slice(["GPU-a", "GPU-b"], 2)
    assert log.read_text().splitlines() == [
        "-i GPU-a -c DEFAULT",
        "compute-policy -i GPU-a --set-timeslice 2",
        "-i GPU-b -c DEFAULT",
        "compute-policy -i GPU-b --set-timeslice 2",
    ]
    with pytest.raises(TimeSliceError, match=r"-i GPU-bad -c DEFAULT exited 4: Insufficient Permissions"):
        NvidiaSmi(str(smi)).set_time_slice(["GPU-bad"], 1)
    with pytest.raises(TimeSliceError, match=r"no-smi not found"):
        NvidiaSmi(str(tmp_path / "no-smi")).set_time_slice(["GPU-a"], 1)
