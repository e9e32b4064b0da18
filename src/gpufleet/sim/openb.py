"""Loader of the Alibaba cluster-trace-gpu-v2023 ("openb") node and pod lists.

Node list columns: `sn,cpu_milli,memory_mib,gpu,model`. Pod list columns:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`; `gpu_milli` is the share of each GPU
(below 1000 only for one-GPU sharing pods), `gpu_spec` lists allowed models separated by `|`. Every other
column (qos, phase, times) is ignored. Any row that cannot be read fails with a DataError naming the file,
the line and the field. A node's model must be in the GPU model catalogue (`gpufleet.api.gpu_models`, which
lists the trace's own names); a pod may name a known model no node has (it simply never fits), but a name
that is no GPU model at all is a DataError.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpufleet.api.errors import DataError
from gpufleet.api.gpu_models import is_known_model, unknown_model_message
from gpufleet.fleet.node import NodeSpec
from gpufleet.fleet.request import GPU_MILLI, PodRequest
from gpufleet.sim.csvrows import csv_rows

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of a trace: its name and what it asks for."""

    name: str
    request: PodRequest


def _int(row: dict[str, str], column: str, path: Path, line: int) -> int:
    text, where = row[column], str(path)
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise DataError(f"not a number: {text!r}", path=where, line=line, field=column) from None
        if not number.is_integer():
            raise DataError(
                f"not a whole number: {text!r}", path=str(path), line=line, field=column
            ) from None
        value = int(number)
    if value < 0:
        raise DataError(f"must not be negative: {value}", path=where, line=line, field=column)
    return value


def load_nodes(path: str | Path, *, gpu_only: bool = True) -> list[NodeSpec]:
    """The node list, in file order. With `gpu_only` (the FGD protocol) nodes without GPUs are left out."""
    path = Path(path)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for line, row in csv_rows(path, NODE_COLUMNS):
        name = row["sn"]
        if not name:
            raise DataError("empty node name", path=str(path), line=line, field="sn")
        if name in seen:
            raise DataError(f"duplicate node {name}", path=str(path), line=line, field="sn")
        seen.add(name)
        gpus = _int(row, "gpu", path, line)
        model = row["model"]
        if gpus and not model:
            raise DataError("a node with GPUs needs a model", path=str(path), line=line, field="model")
        if model and not is_known_model(model):
            raise DataError(unknown_model_message(model), path=str(path), line=line, field="model")
        if gpu_only and gpus == 0:
            continue
        nodes.append(
            NodeSpec(
                name=name,
                gpu_model=model if gpus else "",
                gpus=gpus,
                cpu_milli=_int(row, "cpu_milli", path, line),
                memory_mib=_int(row, "memory_mib", path, line),
            )
        )
    return nodes


def pod_request(row: dict[str, str], path: Path, line: int) -> PodRequest:
    """The request of one pod row; inconsistent GPU columns are a DataError."""
    cpu = _int(row, "cpu_milli", path, line)
    memory = _int(row, "memory_mib", path, line)
    num_gpu = _int(row, "num_gpu", path, line)
    milli = _int(row, "gpu_milli", path, line)
    models = tuple(m.strip() for m in row.get("gpu_spec", "").split("|") if m.strip())
    for model in models:
        if not is_known_model(model):
            raise DataError(unknown_model_message(model), path=str(path), line=line, field="gpu_spec")
    if num_gpu == 0:
        if milli:
            raise DataError("gpu_milli without num_gpu", path=str(path), line=line, field="gpu_milli")
        return PodRequest(cpu_milli=cpu, memory_mib=memory)
    if milli == 0 or milli > GPU_MILLI:
        raise DataError(
            f"gpu_milli must be 1..{GPU_MILLI} for a GPU pod, got {milli}",
            path=str(path),
            line=line,
            field="gpu_milli",
        )
    if milli == GPU_MILLI:
        return PodRequest(cpu_milli=cpu, memory_mib=memory, gpus=num_gpu, gpu_models=models)
    if num_gpu != 1:
        raise DataError(
            f"a GPU share (gpu_milli {milli}) must be on one GPU, num_gpu is {num_gpu}",
            path=str(path),
            line=line,
            field="num_gpu",
        )
    return PodRequest(cpu_milli=cpu, memory_mib=memory, gpu_milli=milli, gpu_models=models)


def load_pods(path: str | Path) -> list[TracePod]:
    """The pod list, in file order."""
    path = Path(path)
    pods: list[TracePod] = []
    for line, row in csv_rows(path, POD_COLUMNS):
        name = row["name"]
        if not name:
            raise DataError("empty pod name", path=str(path), line=line, field="name")
        pods.append(TracePod(name, pod_request(row, path, line)))
    return pods
