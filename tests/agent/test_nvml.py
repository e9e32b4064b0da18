"""Discovery: recorded profiles, and RealNvml reading the same NodeInfo from NVML (through a pynvml fake)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from gpufleet.agent.nvml import (
    EVENT_XID_CRITICAL,
    NodeInfo,
    NvmlError,
    RealNvml,
    RecordedNvml,
    bundled_profiles,
    node_from_json,
    node_to_json,
    normalize_bus_id,
    read_profile,
    telemetry_from_json,
)
from gpufleet.api.errors import ValidationError
from gpufleet.sharing import mig

from .fakes import FakePynvml


def test_bundled_profiles() -> None:
    assert bundled_profiles() == ["a100-80gb-mig", "hgx-h100", "pcie-l4"]


@pytest.mark.parametrize("name", ["a100-80gb-mig", "hgx-h100", "pcie-l4"])
def test_profiles_round_trip(name: str) -> None:
    data = read_profile(name)
    where = data.pop("_where")
    node = node_from_json(data, where=where)
    telemetry = telemetry_from_json(data)
    again = node_to_json(node, telemetry=telemetry)
    assert node_from_json(again) == node
    assert telemetry_from_json(again) == telemetry


def test_hgx_h100_is_one_nvswitch_domain_over_two_numa_nodes(h100: RecordedNvml) -> None:
    node = h100.discover()
    assert [g.name for g in node.gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    assert node.nvlink_domains() == [list(range(8))]
    assert node.nvlinks(0, 7) == 18
    assert [g.numa_node for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert node.cuda_version == (12, 4)


def test_a100_mig_layouts_obey_the_placement_rules(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    assert all(g.mig_enabled for g in node.gpus)
    for gpu in node.gpus:
        placements = [
            mig.MigPlacement(m.profile, m.placement_start, m.placement_size) for m in gpu.mig_devices
        ]
        mig.validate_layout("A100-80GB", placements)
        for m in gpu.mig_devices:
            assert mig.profile("A100-80GB", m.profile).gi_profile_id == m.gi_profile_id


def test_pcie_l4_has_no_nvlink(l4: RecordedNvml) -> None:
    node = l4.discover()
    assert node.nvlink_domains() == [[0], [1], [2], [3]]
    assert not any(g.mig_capable for g in node.gpus)


def test_profile_errors_name_the_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="bundled: a100-80gb-mig, hgx-h100, pcie-l4"):
        read_profile("no-such-node")
    bad = tmp_path / "bad.json"
    data = read_profile("pcie-l4")
    data.pop("_where")
    data["gpus"][1]["memoryMiB"] = 1
    bad.write_text(json.dumps(data))
    with pytest.raises(ValidationError, match=r"bad.json: gpus\[1\]: field memoryMiB: unknown field"):
        RecordedNvml.from_profile(bad)


def test_normalize_bus_id() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("0000:3b:00.0") == "0000:3b:00.0"


def _comparable(node: NodeInfo) -> NodeInfo:
    return replace(node, hostname="", machine="")


@pytest.mark.parametrize("name", ["a100-80gb-mig", "hgx-h100", "pcie-l4"])
def test_real_nvml_reads_the_same_node_as_the_profile(name: str) -> None:
    recorded = RecordedNvml.from_profile(name)
    node = recorded.discover()
    real = RealNvml(FakePynvml(node, dict(recorded._telemetry)))
    assert _comparable(real.discover()) == _comparable(node)


def test_real_nvml_telemetry_in_dcgm_units(h100: RecordedNvml) -> None:
    node = h100.discover()
    uuid = node.gpus[0].uuid
    real = RealNvml(FakePynvml(node, {uuid: h100.telemetry(uuid)}))
    real.discover()
    got = real.telemetry(uuid)
    want = h100.telemetry(uuid)
    assert got.power_w == pytest.approx(want.power_w)  # NVML reports mW
    assert got.fb_used_mib == pytest.approx(want.fb_used_mib)  # NVML reports bytes
    assert got.fb_free_mib == pytest.approx(node.gpus[0].memory_mib - (want.fb_used_mib or 0))
    assert got.memory_temp_c == want.memory_temp_c  # a field value
    assert got.gpu_util == want.gpu_util
    assert got.row_remap_failure == 0


def test_real_nvml_vgpu_license_status(h100: RecordedNvml) -> None:
    node = h100.discover()
    uuids = [g.uuid for g in node.gpus]
    readings = {uuids[0]: replace(h100.telemetry(uuids[0]), vgpu_license_status=1.0)}
    readings[uuids[1]] = replace(h100.telemetry(uuids[1]), vgpu_license_status=0.0)
    fake = FakePynvml(node, readings)
    fake.virtualization.update({i: pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU for i in (0, 1)})
    real = RealNvml(fake)
    # Inside a VM: the licensable features' state.
    assert real.telemetry(uuids[0]).vgpu_license_status == 1.0
    assert real.telemetry(uuids[1]).vgpu_license_status == 0.0
    # Bare metal, where NVML says licensing is not supported: no reading, so no series.
    assert real.telemetry(uuids[2]).vgpu_license_status is None
    # A hypervisor: licensed only when every active vGPU instance is.
    fake.virtualization.update({3: pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU})
    fake.virtualization.update({4: pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU})
    fake.virtualization.update({5: pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU})
    fake.host_vgpus.update({3: {31: 1, 32: 1}, 4: {41: 1, 42: 0}})
    assert real.telemetry(uuids[3]).vgpu_license_status == 1.0
    assert real.telemetry(uuids[4]).vgpu_license_status == 0.0
    assert real.telemetry(uuids[5]).vgpu_license_status is None  # no vGPU running


def test_real_nvml_mig_telemetry_is_memory_only(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    device = node.gpus[0].mig_devices[0]
    real = RealNvml(FakePynvml(node, {device.uuid: a100_mig.telemetry(device.uuid)}))
    got = real.telemetry(device.uuid)
    assert got.fb_used_mib == pytest.approx(13.0)
    assert got.gpu_temp_c is None


def test_real_nvml_events_and_probe(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    fake = FakePynvml(node)
    real = RealNvml(fake)
    real.watch_events()
    # Only the health events the device supports are registered (PState is not asked for).
    assert set(fake.registered.values()) == {0x8 | 0x2}
    assert real.wait_event(10) is None
    fake.push_xid(2, 48, gi=3)
    event = real.wait_event(1000)
    assert event is not None
    assert (event.uuid, event.event_type, event.data, event.gi_id, event.ci_id) == (
        node.gpus[2].uuid,
        EVENT_XID_CRITICAL,
        48,
        3,
        None,
    )
    assert real.probe(node.gpus[2].uuid).clean
    fake.recovery_action[2] = 1
    assert real.probe(node.gpus[2].mig_devices[0].uuid).recovery_action == 1
    real.close()


def test_real_nvml_without_a_driver_says_what_to_do(h100: RecordedNvml) -> None:
    with pytest.raises(NvmlError, match="--profile"):
        RealNvml(FakePynvml(h100.discover(), fail_init=True))
