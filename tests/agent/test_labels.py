"""GPU Feature Discovery labels."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.agent.config import parse_config
from gpufleet.agent.deviceplugin.resources import build_resources
from gpufleet.agent.labels import (
    family,
    feature_file_text,
    gfd_labels,
    node_label_patch,
    sanitise,
    write_feature_file,
)
from gpufleet.agent.nvml import NodeInfo, RecordedNvml


def _labels(node: NodeInfo, **config: Any) -> dict[str, str]:
    cfg = parse_config(config)
    return gfd_labels(node, cfg, build_resources(node, cfg), timestamp=1700000000)


def test_h100_labels(h100: RecordedNvml) -> None:
    labels = _labels(h100.discover())
    assert {k: labels[k] for k in labels if k.startswith("nvidia.com/gpu.")} == {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.machine": "HGX-H100-8-GPU",
    }
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.54.15"
    assert labels["nvidia.com/cuda.driver-version.revision"] == "15"
    assert labels["nvidia.com/cuda.driver.rev"] == "15"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels["nvidia.com/cuda.runtime.minor"] == "4"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/mig.strategy"] == "none"
    assert labels["nvidia.com/gfd.timestamp"] == "1700000000"


def test_time_slicing_labels(l4: RecordedNvml) -> None:
    ts = {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    labels = _labels(l4.discover(), sharing=ts)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.family"] == "ada-lovelace"
    assert labels["nvidia.com/mig.capable"] == "false"

    renamed = _labels(l4.discover(), sharing={"timeSlicing": {**ts["timeSlicing"], "renameByDefault": True}})
    assert renamed["nvidia.com/gpu.shared.product"] == "NVIDIA-L4"
    assert renamed["nvidia.com/gpu.shared.replicas"] == "4"
    assert "nvidia.com/gpu.product" not in renamed

    mps = _labels(l4.discover(), sharing={"mps": ts["timeSlicing"]})
    assert mps["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert mps["nvidia.com/mps.capable"] == "true"


def test_mixed_mig_labels(a100_mig: RecordedNvml) -> None:
    labels = _labels(a100_mig.discover(), flags={"migStrategy": "mixed", "gfd": {"noTimestamp": True}})
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert {
        k.removeprefix("nvidia.com/mig-1g.10gb."): v for k, v in labels.items() if "mig-1g.10gb" in k
    } == {
        "count": "22",
        "product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "memory": "9728",
        "multiprocessors": "14",
        "slices.gi": "1",
        "slices.ci": "1",
        "engines.copy": "1",
        "engines.decoder": "0",
        "engines.encoder": "0",
        "engines.jpeg": "0",
        "engines.ofa": "0",
        "replicas": "1",
        "sharing-strategy": "none",
    }
    assert "nvidia.com/gfd.timestamp" not in labels


def test_single_mig_overrides_gpu_labels(a100_mig: RecordedNvml) -> None:
    node = a100_mig.discover()
    uniform = replace(node, gpus=tuple(g for g in node.gpus if g.index in (6, 7)))
    labels = _labels(uniform, flags={"migStrategy": "single"})
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.memory"] == "40192"
    assert labels["nvidia.com/gpu.slices.gi"] == "3"


@pytest.mark.parametrize(
    ("cc", "name"),
    [((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"), ((8, 6), "ampere"), ((8, 9), "ada-lovelace"),
     ((9, 0), "hopper"), ((10, 0), "blackwell"), ((12, 0), "blackwell"), ((4, 0), "undefined")],
)  # fmt: skip
def test_family(cc: tuple[int, int], name: str) -> None:
    assert family(*cc) == name


def test_sanitise() -> None:
    assert sanitise("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert sanitise("PowerEdge XE9680 (rev 2)") == "PowerEdge-XE9680--rev-2"


def test_feature_file_and_node_patch(tmp_path: Path, l4: RecordedNvml) -> None:
    labels = _labels(l4.discover())
    path = tmp_path / "features.d" / "gfd"
    write_feature_file(labels, path)
    text = path.read_text()
    assert text == feature_file_text(labels)
    assert "nvidia.com/gpu.product=NVIDIA-L4\n" in text
    assert list(tmp_path.joinpath("features.d").iterdir()) == [path]

    current = {
        "kubernetes.io/hostname": "l4-0",
        "nvidia.com/gpu.product": "NVIDIA-T4",
        "nvidia.com/mig-1g.5gb.count": "7",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.present": "true",
        **{k: v for k, v in labels.items() if k != "nvidia.com/gpu.product"},
    }
    patch = node_label_patch(labels, current)
    assert patch == {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/mig-1g.5gb.count": None}
