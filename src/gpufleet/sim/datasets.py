"""Where trace files live: data directory resolution, trace names and the published FGD figures.

The data directory is `--data DIR`, else `$GPUFLEET_DATA`, else `shared/data` beside the repository
(the parent of the repository root). Inside it the Alibaba files are under `alibaba-gpu-v2023/csv/` and the
published figures under `fgd-atc23-expected-results/`.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from gpufleet.api.errors import DataError

DATA_ENV = "GPUFLEET_DATA"
OPENB_DIR = Path("alibaba-gpu-v2023") / "csv"
PUBLISHED_FILE = Path("fgd-atc23-expected-results") / "targets_alloc_summary.csv"
POD_PREFIX = "openb_pod_list_"
NODE_FILE = "openb_node_list_gpu_node.csv"

# The published file's policy labels, by our policy names.
PUBLISHED_POLICIES = {
    "01-Random": "random",
    "02-DotProd": "dotprod",
    "03-GpuClustering": "clustering",
    "04-GpuPacking": "packing",
    "05-BestFit": "bestfit",
    "06-FGD": "fgd",
}


@dataclass(frozen=True, slots=True)
class TraceFiles:
    """A resolved trace: its short name, its pod list and the node list it runs on."""

    name: str
    pods: Path
    nodes: Path


def repo_root(start: Path | None = None) -> Path | None:
    """The nearest directory at or above `start` (else this package, else the cwd) with a pyproject.toml."""
    starts = [start] if start is not None else [Path(__file__).resolve().parent, Path.cwd().resolve()]
    for origin in starts:
        for folder in (origin, *origin.parents):
            if (folder / "pyproject.toml").is_file():
                return folder
    return None


def data_dir(data: str | Path | None = None) -> Path:
    """The data directory, by `data`, then $GPUFLEET_DATA, then `../shared/data` beside the repository."""
    if data is not None:
        return Path(data)
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    root = repo_root()
    base = root.parent if root is not None else Path.cwd().parent
    return base / "shared" / "data"


def trace_names(data: str | Path | None = None) -> list[str]:
    """The trace names available in the data directory (default, cpu050, ...)."""
    folder = data_dir(data) / OPENB_DIR
    return sorted(p.stem[len(POD_PREFIX) :] for p in folder.glob(f"{POD_PREFIX}*.csv"))


def resolve_trace(trace: str, data: str | Path | None = None) -> TraceFiles:
    """A trace by name (`default`, `cpu050`, ...) or by the path of a pod list CSV.

    The node list is `openb_node_list_gpu_node.csv` beside a pod list given by path when there is one,
    else the one in the data directory.
    """
    openb = data_dir(data) / OPENB_DIR
    as_path = Path(trace)
    if as_path.suffix == ".csv" or os.sep in trace or as_path.is_file():
        if not as_path.is_file():
            raise DataError("no such pod list file", path=trace)
        stem = as_path.stem
        name = stem[len(POD_PREFIX) :] if stem.startswith(POD_PREFIX) else stem
        beside = as_path.parent / NODE_FILE
        nodes = beside if beside.is_file() else openb / NODE_FILE
    else:
        name = trace
        pods = openb / f"{POD_PREFIX}{trace}.csv"
        if not pods.is_file():
            known = ", ".join(trace_names(data)) or f"none found in {openb}"
            raise DataError(f"unknown trace {trace!r}; known traces: {known}", path=str(pods))
        as_path, nodes = pods, openb / NODE_FILE
    if not nodes.is_file():
        raise DataError("node list not found (set --data or $GPUFLEET_DATA)", path=str(nodes))
    return TraceFiles(name, as_path, nodes)


def load_published(trace: str, data: str | Path | None = None) -> dict[str, dict[int, float]]:
    """Published unallocated GPU % per policy and arrived %, for one trace name (empty if none)."""
    path = data_dir(data) / PUBLISHED_FILE
    if not path.is_file():
        return {}
    out: dict[str, dict[int, float]] = {}
    workload = f"{POD_PREFIX}{trace}"
    with path.open(newline="", encoding="utf-8") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            if row.get("workload") != workload:
                continue
            policy = PUBLISHED_POLICIES.get(row.get("sc_policy", ""))
            if policy is None:
                continue
            try:
                pct, unalloc = int(row["arrive_pct"]), float(row["unalloc_mean"])
            except (KeyError, TypeError, ValueError) as exc:
                raise DataError(f"bad published figure: {exc}", path=str(path), line=line) from exc
            out.setdefault(policy, {})[pct] = unalloc
    return out
