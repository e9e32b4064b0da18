"""The CDI specs the DRA driver writes, as a container runtime merges them: a container given devices of
several claims sees every claim's devices, and a MIG instance comes with the /dev/nvidia-caps nodes
of its GPU and compute instance (minors from the driver's mig-minors table)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpufleet.agent.dra.driver import ClaimRef, DraDriver, PrepareError
from gpufleet.agent.dra.migcaps import MigCaps, MigCapsError, caps_major, parse_mig_minors
from gpufleet.agent.dra.toolkit import common_edits
from gpufleet.agent.health import HealthState
from gpufleet.agent.nvml import NodeInfo, RecordedNvml
from gpufleet.api.dra import ResourceClaim

from .cdi_runtime import inject

NODE = "a100-mig-0"
DRIVER = "gpu.nvidia.com"
CAPS_MAJOR = 237
CONTROL = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}


def mig_minors(gpus: int = 8) -> str:
    """The table as the driver writes it: config, monitor, then every GPU's GI 0-14, each with CI 0-7."""
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(gpus):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(8):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    return "\n".join(lines) + "\n"


def allocated(name: str, uid: str, *devices: str) -> ResourceClaim:
    results = [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "team-a", "uid": uid},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


@pytest.fixture
def node(a100_mig: RecordedNvml) -> NodeInfo:
    return a100_mig.discover()


def driver_for(node: NodeInfo, root: Path, claims: dict[str, ResourceClaim], caps: MigCaps) -> DraDriver:
    return DraDriver(
        node,
        node_name=NODE,
        health=HealthState(),
        read_claim=lambda ns, name: claims.get(name),
        publish=None,
        state_dir=root / "state",
        cdi_dir=root / "cdi",
        mig_caps=caps,
    )


def ids(driver: DraDriver, name: str, uid: str) -> list[str]:
    return [i for d in driver.prepare(ClaimRef("team-a", uid, name)) for i in d.cdi_device_ids]


@pytest.fixture
def caps(tmp_path: Path) -> MigCaps:
    (tmp_path / "mig-minors").write_text(mig_minors())
    (tmp_path / "devices").write_text(f"Character devices:\n195 nvidia\n{CAPS_MAJOR} nvidia-caps\n")
    # the driver's per-capability file, here for gpu0's GI 1 only (mode 0444)
    access = tmp_path / "capabilities" / "gpu0" / "mig" / "gi1"
    access.mkdir(parents=True)
    (access / "access").write_text("DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    return MigCaps(
        mig_minors=tmp_path / "mig-minors",
        proc_devices=tmp_path / "devices",
        capabilities=tmp_path / "capabilities",
    )


def test_dra_two_claims_in_one_container_see_the_devices_of_both(
    node: NodeInfo, tmp_path: Path, caps: MigCaps
) -> None:
    claims = {
        "train": allocated("train", "uid-a", "gpu-2", "gpu-3"),
        "infer": allocated("infer", "uid-b", "gpu-5"),
    }
    driver = driver_for(node, tmp_path, claims, caps)
    first, second = ids(driver, "train", "uid-a"), ids(driver, "infer", "uid-b")

    both = inject(tmp_path / "cdi", first + second)
    gpus = {node.gpus[i].device_path for i in (2, 3, 5)}
    assert set(both.device_nodes) == gpus | CONTROL
    # No claim's list overrides the other's: the variable names no device in any spec (the NVIDIA
    # runtime's legacy hook mounts only the driver's libraries), the devices are both claims' CDI nodes.
    assert both.env["NVIDIA_VISIBLE_DEVICES"] == "none"
    # the container does not depend on the order in which the kubelet lists the claims
    assert inject(tmp_path / "cdi", second + first) == both
    # each claim alone: only its own GPUs
    assert set(inject(tmp_path / "cdi", second).device_nodes) == {node.gpus[5].device_path} | CONTROL


def test_dra_a_mig_instance_brings_its_gpu_and_compute_instance_caps_nodes(
    node: NodeInfo, tmp_path: Path, caps: MigCaps
) -> None:
    # gpu-0's 3g instance is GI 1 / CI 0, its 2g instance GI 2 / CI 0 (the recorded node)
    claims = {
        "big": allocated("big", "uid-m", "gpu-0-mig-9-4-4"),
        "small": allocated("small", "uid-n", "gpu-0-mig-14-0-2"),
    }
    driver = driver_for(node, tmp_path, claims, caps)
    container = inject(tmp_path / "cdi", ids(driver, "big", "uid-m") + ids(driver, "small", "uid-n"))
    caps_nodes = {p: n for p, n in container.device_nodes.items() if p.startswith("/dev/nvidia-caps/")}
    # mig-minors: gpu0/gi1/access 12, gpu0/gi1/ci0/access 13, gpu0/gi2/access 21, gpu0/gi2/ci0/access 22
    assert caps_nodes == {
        f"/dev/nvidia-caps/nvidia-cap{m}": {
            "path": f"/dev/nvidia-caps/nvidia-cap{m}",
            "type": "c",
            "major": CAPS_MAJOR,
            "minor": m,
            # the mode from the capability's access file where the driver has one
            **({"fileMode": 0o444} if m == 12 else {}),
        }
        for m in (12, 13, 21, 22)
    }
    assert node.gpus[0].device_path in container.device_nodes  # the parent's node, once
    assert container.env["NVIDIA_VISIBLE_DEVICES"] == "none"


def test_dra_a_mig_instance_the_driver_table_lacks_is_refused_naming_claim_and_device(
    node: NodeInfo, tmp_path: Path
) -> None:
    (tmp_path / "mig-minors").write_text("config 1\nmonitor 2\ngpu0/gi1/access 12\n")
    caps = MigCaps(mig_minors=tmp_path / "mig-minors", proc_devices=tmp_path / "devices")
    driver = driver_for(node, tmp_path, {"big": allocated("big", "uid-m", "gpu-0-mig-9-4-4")}, caps)
    with pytest.raises(PrepareError, match=r"team-a/big.*gpu-0-mig-9-4-4.*no gpu0/gi1/ci0/access"):
        driver.prepare(ClaimRef("team-a", "uid-m", "big"))


def test_dra_without_mig_minors_a_mig_instance_gets_its_parent_node_and_a_log_line(
    node: NodeInfo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caps = MigCaps(mig_minors=tmp_path / "absent", proc_devices=tmp_path / "absent-too")
    driver = driver_for(node, tmp_path, {"big": allocated("big", "uid-m", "gpu-0-mig-9-4-4")}, caps)
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent.dra"):
        container = inject(tmp_path / "cdi", ids(driver, "big", "uid-m"))
    assert set(container.device_nodes) == {node.gpus[0].device_path} | CONTROL
    assert any(
        "absent not found" in r.getMessage() and "nvidia-caps" in r.getMessage() for r in caplog.records
    )


def test_dra_mig_minors_and_proc_devices_are_parsed_or_refused_with_the_line() -> None:
    assert parse_mig_minors("config 1\n\ngpu3/gi2/ci1/access 400\n") == {
        "config": 1,
        "gpu3/gi2/ci1/access": 400,
    }
    with pytest.raises(MigCapsError, match=r"line 2: 'gpu0/gi1/access x'"):
        parse_mig_minors("config 1\ngpu0/gi1/access x\n")
    assert caps_major("Character devices:\n  1 mem\n508 nvidia-caps\n\nBlock devices:\n") == 508
    assert caps_major("Character devices:\n195 nvidia\n") is None


TOOLKIT_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
    "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"],
        "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
        "mounts": [
            {
                "hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        ],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-cdi-hook",
                "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"],
            }
        ],
    },
}


def fake_nvidia_ctk(root: Path, spec: object, status: int = 0) -> Path:
    """An `nvidia-ctk` that records its arguments and writes `spec` (as `cdi generate` does, to stdout)."""
    (root / "spec.json").write_text(json.dumps(spec))
    script = root / "nvidia-ctk"
    script.write_text(
        f'#!/bin/sh\necho "$@" > {root}/args\necho "level=info msg=generating" >&2\n'
        f"cat {root}/spec.json\nexit {status}\n"
    )
    script.chmod(0o755)
    return script


def test_dra_specs_carry_the_toolkits_common_edits_and_keep_every_claims_devices(
    node: NodeInfo, tmp_path: Path, caps: MigCaps
) -> None:
    edits = common_edits(str(fake_nvidia_ctk(tmp_path, TOOLKIT_SPEC)))
    assert (tmp_path / "args").read_text().split() == [
        "cdi",
        "generate",
        "--format=json",
        "--driver-root=/",
        "--dev-root=/",
    ]
    assert edits is not None and edits["mounts"] == TOOLKIT_SPEC["containerEdits"]["mounts"]  # type: ignore[index]
    claims = {"a": allocated("a", "uid-a", "gpu-1"), "b": allocated("b", "uid-b", "gpu-0-mig-19-2-1")}
    driver = DraDriver(
        node,
        node_name=NODE,
        health=HealthState(),
        read_claim=lambda ns, name: claims.get(name),
        publish=None,
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        mig_caps=caps,
        common_edits=edits,
    )
    container = inject(tmp_path / "cdi", ids(driver, "a", "uid-a") + ids(driver, "b", "uid-b"))
    assert container.env == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "NVIDIA_CTK_LIBCUDA_DIR": "/usr/lib/x86_64-linux-gnu",
    }
    assert list(container.mounts) == ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"]
    assert {h["args"][1] for h in container.hooks} == {"update-ldcache"}
    # gpu-0's 1g instance at slot 2 is GI 3 / CI 0: gpu0/gi3/access 30, gpu0/gi3/ci0/access 31
    assert (
        set(container.device_nodes)
        == {
            node.gpus[1].device_path,
            node.gpus[0].device_path,
            "/dev/nvidia-caps/nvidia-cap30",
            "/dev/nvidia-caps/nvidia-cap31",
        }
        | CONTROL
    )
    spec = json.loads(next((tmp_path / "cdi").glob("*uid-a.json")).read_text())
    paths = [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
    assert sorted(paths) == sorted(set(paths))  # the toolkit's control nodes are not listed twice


def test_dra_without_a_working_toolkit_the_specs_carry_device_nodes_and_the_log_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent.dra"):
        assert common_edits(str(tmp_path / "no-such-ctk")) is None
        assert common_edits(str(fake_nvidia_ctk(tmp_path, TOOLKIT_SPEC, status=1))) is None
        assert common_edits(str(fake_nvidia_ctk(tmp_path, {"containerEdits": {"env": "x"}}))) is None
    said = " | ".join(r.getMessage() for r in caplog.records)
    assert "no-such-ctk not found" in said and "NVIDIA_VISIBLE_DEVICES=none" in said
    assert "exited 1: level=info msg=generating" in said
    assert "containerEdits.env is not a list" in said
    assert common_edits("") is None
