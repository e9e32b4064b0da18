"""Resources under each MIG strategy and sharing mode, and preferred allocations, without gRPC."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpufleet.agent.config import parse_config
from gpufleet.agent.deviceplugin.allocation import AllocationError, preferred_allocation
from gpufleet.agent.deviceplugin.resources import build_resources
from gpufleet.agent.nvml import NodeInfo, RecordedNvml
from gpufleet.api.errors import ValidationError


def _resources(node: NodeInfo, **config: Any) -> dict[str, list[str]]:
    return {r.name: [d.id for d in r.devices] for r in build_resources(node, parse_config(config))}


def test_mig_strategy_none_exposes_whole_gpus(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    assert _resources(node) == {"nvidia.com/gpu": [g.uuid for g in node.gpus]}


def test_mig_strategy_single_needs_one_profile_everywhere(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    with pytest.raises(
        ValidationError, match=r"one MIG profile on every GPU; found \['1g.10gb', '2g.20gb', '3g.40gb'\]"
    ):
        build_resources(node, parse_config({"flags": {"migStrategy": "single"}}))
    uniform = replace(node, gpus=tuple(g for g in node.gpus if g.index in (4, 5)))
    resources = build_resources(uniform, parse_config({"flags": {"migStrategy": "single"}}))
    assert [(r.name, r.mig_profile, len(r.devices)) for r in resources] == [("nvidia.com/gpu", "1g.10gb", 14)]
    assert resources[0].devices[8].index == "5:1"


def test_mig_strategy_single_rejects_a_partly_mig_node(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    partly = replace(node, gpus=(node.gpus[0], replace(node.gpus[1], mig_enabled=False, mig_devices=())))
    with pytest.raises(ValidationError, match="on every GPU or on none"):
        build_resources(partly, parse_config({"flags": {"migStrategy": "single"}}))


def test_mixed_keeps_whole_gpus_beside_mig_profiles(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    partly = replace(node, gpus=(node.gpus[0], replace(node.gpus[1], mig_enabled=False, mig_devices=())))
    got = _resources(partly, flags={"migStrategy": "mixed"})
    assert got["nvidia.com/gpu"] == [node.gpus[1].uuid]
    assert sorted(got) == [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]


def test_time_slicing_mixed_mig_resource(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    sharing = {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}}
    got = _resources(node, flags={"migStrategy": "mixed"}, sharing=sharing)
    assert len(got["nvidia.com/mig-3g.40gb"]) == 16
    assert got["nvidia.com/mig-3g.40gb"][1].endswith("::1")
    assert len(got["nvidia.com/mig-1g.10gb"]) == 22


def _mps(replicas: int = 2, name: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {"mps": {"resources": [{"name": name, "replicas": replicas}]}}


def test_mps_refuses_gpus_in_mig_mode_under_strategy_none(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    # With migStrategy none the MIG-mode GPUs are advertised whole; MPS must not replicate them.
    with pytest.raises(
        ValidationError, match=r"field sharing\.mps: MPS sharing is not supported on GPUs in MIG"
    ):
        build_resources(node, parse_config({"sharing": _mps()}))
    partly = replace(node, gpus=(node.gpus[0], replace(node.gpus[1], mig_enabled=False, mig_devices=())))
    with pytest.raises(ValidationError, match=r"MIG is enabled on GPU 0: disable MIG"):
        build_resources(partly, parse_config({"sharing": _mps()}))
    # One replica is no sharing at all, and time-slicing works on MIG-mode GPUs.
    assert len(_resources(node, sharing=_mps(replicas=1))["nvidia.com/gpu"]) == 8
    ts = {"timeSlicing": _mps()["mps"]}
    assert len(_resources(node, sharing=ts)["nvidia.com/gpu"]) == 16


def test_mps_still_shares_gpus_without_mig(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    whole = replace(node, gpus=tuple(replace(g, mig_enabled=False, mig_devices=()) for g in node.gpus[:2]))
    (resource,) = build_resources(whole, parse_config({"sharing": _mps()}))
    assert resource.sharing == "mps" and len(resource.devices) == 4


def test_sharing_config_errors(a100_mig: RecordedNvml, l4: RecordedNvml) -> None:
    with pytest.raises(ValidationError, match="MPS sharing is not supported on GPUs in MIG mode"):
        build_resources(
            a100_mig.discover(),
            parse_config(
                {
                    "flags": {"migStrategy": "mixed"},
                    "sharing": {"mps": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}},
                }
            ),
        )
    with pytest.raises(ValidationError, match="does not advertise"):
        build_resources(
            l4.discover(),
            parse_config(
                {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpus", "replicas": 2}]}}}
            ),
        )


def test_preferred_whole_gpus_on_pcie_pairs(l4: RecordedNvml) -> None:
    node = l4.discover()
    (resource,) = build_resources(node, parse_config({}))
    u = [g.uuid for g in node.gpus]
    # GPUs 0-1 and 2-3 share a PCIe switch; with GPU 1 gone, the pair 2-3 is better than 0 with anything.
    assert preferred_allocation(resource, node, [u[0], u[2], u[3]], [], 2) == [u[2], u[3]]
    assert preferred_allocation(resource, node, u, [u[3]], 2) == [u[3], u[2]]
    with pytest.raises(AllocationError, match="unknown device"):
        preferred_allocation(resource, node, ["GPU-x"], [], 1)


def test_preferred_replicas_packed_fills_one_gpu(l4: RecordedNvml) -> None:
    node = l4.discover()
    config = parse_config(
        {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    )
    (resource,) = build_resources(node, config)
    ids = [d.id for d in resource.devices]
    # GPU 0 already has two replicas in use: packed fills it, distributed avoids it.
    free = ids[2:]
    packed = preferred_allocation(resource, node, free, [], 2, policy="packed")
    assert {i.split("::")[0] for i in packed} == {node.gpus[0].uuid}
    spread = preferred_allocation(resource, node, free, [], 2, policy="distributed")
    assert node.gpus[0].uuid not in {i.split("::")[0] for i in spread}
    assert len({i.split("::")[0] for i in spread}) == 2
