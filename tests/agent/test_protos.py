"""The committed gRPC stubs match their .proto files, and the wire identity is kubelet's."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.agent.deviceplugin._generated import deviceplugin_pb2 as pb
from gpufleet.agent.deviceplugin._generated import podresources_pb2 as prpb
from gpufleet.agent.dra._generated import dra_v1_pb2 as dra_v1
from gpufleet.agent.dra._generated import dra_v1beta1_pb2 as dra_v1beta1
from gpufleet.agent.dra._generated import pluginregistration_pb2 as regpb

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("gpufleet/agent/deviceplugin/_generated", "gpufleet/agent/dra/_generated")


@pytest.mark.parametrize("generated", GENERATED)
def test_stubs_are_up_to_date(tmp_path: Path, generated: str) -> None:
    pytest.importorskip("grpc_tools")
    subprocess.run(
        ["bash", str(ROOT / "scripts/gen-protos.sh"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    fresh = tmp_path / generated
    names = sorted(p.name for p in fresh.iterdir())
    assert names, "protoc produced nothing"
    _, mismatch, errors = filecmp.cmpfiles(fresh, ROOT / "src" / generated, names, shallow=False)
    assert (mismatch, errors) == ([], []), "stale stubs: run scripts/gen-protos.sh"


def test_method_paths_and_field_numbers() -> None:
    plugin = pb.DESCRIPTOR.services_by_name["DevicePlugin"]
    assert [m.full_name for m in plugin.methods] == [
        "v1beta1.DevicePlugin.GetDevicePluginOptions",
        "v1beta1.DevicePlugin.ListAndWatch",
        "v1beta1.DevicePlugin.GetPreferredAllocation",
        "v1beta1.DevicePlugin.Allocate",
        "v1beta1.DevicePlugin.PreStartContainer",
    ]
    assert plugin.methods_by_name["ListAndWatch"].server_streaming
    assert (
        pb.DESCRIPTOR.services_by_name["Registration"].methods[0].full_name == "v1beta1.Registration.Register"
    )

    def numbers(message: object) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(pb.RegisterRequest) == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert numbers(pb.Device) == {"ID": 1, "health": 2, "topology": 3}
    assert numbers(pb.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    }
    assert numbers(pb.ContainerAllocateResponse) == {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    }
    assert numbers(pb.DeviceSpec) == {"container_path": 1, "host_path": 2, "permissions": 3}
    assert numbers(prpb.ContainerResources) == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    assert numbers(prpb.DynamicResource) == {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    assert prpb.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name["List"].full_name == (
        "v1.PodResourcesLister.List"
    )


def test_dra_and_registration_wire_identity() -> None:
    for pb_dra, version in ((dra_v1, "v1"), (dra_v1beta1, "v1beta1")):
        service = pb_dra.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert [m.full_name for m in service.methods] == [
            f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin.NodePrepareResources",
            f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin.NodeUnprepareResources",
        ]
        assert {f.name: f.number for f in pb_dra.Device.DESCRIPTOR.fields} == {
            "request_names": 1,
            "pool_name": 2,
            "device_name": 3,
            "cdi_device_ids": 4,
        }
        assert {f.name: f.number for f in pb_dra.Claim.DESCRIPTOR.fields} == {
            "namespace": 1,
            "uid": 2,
            "name": 3,
        }
    registration = regpb.DESCRIPTOR.services_by_name["Registration"]
    assert [m.full_name for m in registration.methods] == [
        "pluginregistration.Registration.GetInfo",
        "pluginregistration.Registration.NotifyRegistrationStatus",
    ]
    assert {f.name: f.number for f in regpb.PluginInfo.DESCRIPTOR.fields} == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
