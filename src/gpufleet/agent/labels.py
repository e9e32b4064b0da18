"""GPU Feature Discovery's node labels, as a node-feature file and as a patch for the Node.

The label set is GFD's (NVIDIA-STACK.md section 3): CUDA driver and runtime versions, and per
advertised resource `<resource>.{count, product, memory, replicas, sharing-strategy, ...}`, so a pod
spec with `nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}` selects the same nodes
whether GFD or this agent labelled them. `nvidia.com/gpu.*` describes the physical GPUs except under
the `single` MIG strategy, where it describes the MIG devices advertised as `nvidia.com/gpu`.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpufleet.agent.config import DEFAULT_RESOURCE, AgentConfig
from gpufleet.agent.deviceplugin.resources import Resource
from gpufleet.agent.nvml import NodeInfo

PREFIX = "nvidia.com/"
# Labels this agent owns on a Node: stale ones among these are removed when it relabels. GPU
# Operator's own `nvidia.com/gpu.deploy.*`, `nvidia.com/gpu.present` and the plugin-config selector
# are someone else's and never touched.
_OWNED = re.compile(r"^nvidia\.com/(gpu\.|mig[.-]|cuda\.|gfd\.|mps\.|vgpu\.)")
_NOT_OWNED = re.compile(r"^nvidia\.com/(gpu\.deploy\.|gpu\.present$|device-plugin\.config$)")


def family(major: int, minor: int) -> str:
    """GFD's architecture family of a compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell",
            12: "blackwell", 13: "rubin"}.get(major, "undefined")  # fmt: skip


def sanitise(name: str) -> str:
    """GFD's label-value form of a product or machine name: words joined by '-'."""
    value = "-".join(name.split())
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", value)
    return value.strip("-_.")[:63] or "unknown"


def _version_labels(prefix: str, parts: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    return {f"{prefix}.{name}": part for name, part in zip(names, parts, strict=False) if part}


def gfd_labels(
    node: NodeInfo, config: AgentConfig, resources: Sequence[Resource], *, timestamp: int | None = None
) -> dict[str, str]:
    """The full label set for a node."""
    labels: dict[str, str] = {}
    if not node.gpus:
        return labels
    driver = node.driver_version.split(".")
    cuda_major, cuda_minor = node.cuda_version
    labels |= _version_labels("nvidia.com/cuda.driver-version", driver, ("major", "minor", "revision"))
    labels["nvidia.com/cuda.driver-version.full"] = node.driver_version
    labels |= _version_labels("nvidia.com/cuda.driver", driver, ("major", "minor", "rev"))
    labels |= {
        "nvidia.com/cuda.runtime-version.major": str(cuda_major),
        "nvidia.com/cuda.runtime-version.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        "nvidia.com/cuda.runtime.major": str(cuda_major),
        "nvidia.com/cuda.runtime.minor": str(cuda_minor),
    }
    if timestamp is not None and not config.flags.gfd.no_timestamp:
        labels["nvidia.com/gfd.timestamp"] = str(timestamp)
    labels["nvidia.com/gpu.machine"] = sanitise(node.machine)
    labels["nvidia.com/mig.capable"] = str(any(g.mig_capable for g in node.gpus)).lower()
    labels["nvidia.com/mig.strategy"] = config.flags.mig_strategy
    labels["nvidia.com/mps.capable"] = str(config.sharing.strategy == "mps").lower()
    labels["nvidia.com/vgpu.present"] = "false"

    # The physical GPUs: the most common model names the node (GFD assumes a homogeneous node).
    model = Counter(g.name for g in node.gpus).most_common(1)[0][0]
    first = next(g for g in node.gpus if g.name == model)
    major, minor = first.compute_capability
    by_name = {r.base: r for r in resources}
    whole = by_name.get(DEFAULT_RESOURCE)
    whole_is_gpus = whole is None or whole.mig_profile is None
    replicas = whole.replicas if whole is not None and whole_is_gpus else 1
    product = sanitise(model)
    gpu_labels = {
        "count": str(len(node.gpus)),
        "product": product,
        "memory": str(first.memory_mib),
        "family": family(major, minor),
        "compute.major": str(major),
        "compute.minor": str(minor),
        "mode": "compute",
        "replicas": str(replicas),
        "sharing-strategy": whole.sharing if whole is not None and whole_is_gpus else "none",
    }
    if replicas > 1 and whole is not None and whole.name == whole.base:
        gpu_labels["product"] = f"{product}-SHARED"
    # Renamed shared resources carry their labels under their own name, like GFD's.
    gpu_prefix = whole.name if whole is not None and whole_is_gpus else DEFAULT_RESOURCE
    labels |= {f"{gpu_prefix}.{k}": v for k, v in gpu_labels.items()}
    # The multi-node NVLink domain, as GFD labels it: only when every GPU is in the same clique.
    cliques = {g.fabric_clique for g in node.gpus}
    if len(cliques) == 1 and None not in cliques:
        labels["nvidia.com/gpu.clique"] = str(cliques.pop())

    for resource in resources:
        if resource.mig_profile is None:
            continue
        sample = resource.physical[0]
        assert sample.mig is not None
        mig = sample.mig
        keys = {
            "count": str(len(resource.physical)),
            "product": f"{product}-MIG-{resource.mig_profile}",
            "memory": str(mig.memory_mib),
            "multiprocessors": str(mig.multiprocessors),
            "slices.gi": str(mig.gi_slices),
            "slices.ci": str(mig.ci_slices),
            "engines.copy": str(mig.copy_engines),
            "engines.decoder": str(mig.decoders),
            "engines.encoder": str(mig.encoders),
            "engines.jpeg": str(mig.jpegs),
            "engines.ofa": str(mig.ofas),
            "replicas": str(resource.replicas),
            "sharing-strategy": resource.sharing,
        }
        if resource.replicas > 1 and resource.name == resource.base:
            keys["product"] += "-SHARED"
        # Under `single` these override the nvidia.com/gpu.* labels of the physical GPUs.
        labels |= {f"{resource.name}.{k}": v for k, v in keys.items()}
    return labels


def feature_file_text(labels: Mapping[str, str]) -> str:
    """node-feature-discovery's local feature file: one `name=value` a line."""
    return "".join(f"{key}={value}\n" for key, value in sorted(labels.items()))


def write_feature_file(labels: Mapping[str, str], path: str | Path) -> None:
    """Writes the file atomically, so NFD never reads half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(feature_file_text(labels))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def owned(key: str) -> bool:
    return bool(_OWNED.match(key)) and not _NOT_OWNED.match(key)


def node_label_patch(labels: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch of Node labels: new and changed values, and None for stale labels this agent owns."""
    patch: dict[str, str | None] = {k: v for k, v in labels.items() if current.get(k) != v}
    patch |= {k: None for k in current if owned(k) and k not in labels}
    return patch
