"""Where trace files live: data directory resolution, trace names and the published FGD figures.

The data directory is `--data-dir DIR` when given, else `$GPUFLEET_DATA` when set (either is the one
place looked in); else the first of `shared/data` beside the repository (the parent of the repository
root) and the user's cache (`$XDG_CACHE_HOME/gpufleet/data`, by default `~/.cache/gpufleet/data`,
where `gpufleet data fetch openb` puts the traces) that holds the trace. Inside it the Alibaba files
are under `alibaba-gpu-v2023/csv/` and the published figures under `fgd-atc23-expected-results/`.
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
    """A resolved trace: its short name, its pod list(s) and the node list it runs on."""

    name: str
    pods: Path
    nodes: Path
    then: tuple[Path, ...] = ()  # pod lists whose pods arrive after `pods`' (a joined trace)


def repo_root(start: Path | None = None) -> Path | None:
    """The nearest directory at or above `start` (else this package, else the cwd) with a pyproject.toml."""
    starts = [start] if start is not None else [Path(__file__).resolve().parent, Path.cwd().resolve()]
    for origin in starts:
        for folder in (origin, *origin.parents):
            if (folder / "pyproject.toml").is_file():
                return folder
    return None


def cache_dir() -> Path:
    """The user's cache of fetched data: `$XDG_CACHE_HOME/gpufleet/data`, by default under ~/.cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "gpufleet" / "data"


def data_dirs(data: str | Path | None = None) -> list[Path]:
    """Where traces are looked for, in order: `data` alone when given, else $GPUFLEET_DATA alone when
    set, else `../shared/data` beside the repository, then the user's cache."""
    if data is not None:
        return [Path(data)]
    env = os.environ.get(DATA_ENV)
    if env:
        return [Path(env)]
    root = repo_root()
    base = root.parent if root is not None else Path.cwd().parent
    return [base / "shared" / "data", cache_dir()]


def data_dir(data: str | Path | None = None) -> Path:
    """The data directory: the first of `data_dirs` that holds openb traces, else the first of them."""
    dirs = data_dirs(data)
    return next((d for d in dirs if _pod_lists(d / OPENB_DIR)), dirs[0])


def _pod_lists(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{POD_PREFIX}*.csv"))


def trace_names(data: str | Path | None = None) -> list[str]:
    """The trace names available in the data directories (default, cpu050, ...)."""
    names = {p.stem[len(POD_PREFIX) :] for d in data_dirs(data) for p in _pod_lists(d / OPENB_DIR)}
    return sorted(names)


FETCH_HINT = "get the openb traces with `gpufleet data fetch openb`"


def resolve_trace(trace: str, data: str | Path | None = None) -> TraceFiles:
    """A trace by name (`default`, `cpu050`, ...) or by the path of a pod list CSV.

    A name is looked for in each of `data_dirs` in turn; its node list is `openb_node_list_gpu_node.csv`
    of the same directory. A pod list given by path takes the node list beside it when there is one,
    else the one of the data directory.
    """
    as_path = Path(trace)
    if as_path.suffix == ".csv" or os.sep in trace or as_path.is_file():
        if not as_path.is_file():
            raise DataError("no such pod list file", path=trace)
        stem = as_path.stem
        name = stem[len(POD_PREFIX) :] if stem.startswith(POD_PREFIX) else stem
        beside = as_path.parent / NODE_FILE
        nodes = beside if beside.is_file() else data_dir(data) / OPENB_DIR / NODE_FILE
    else:
        name = trace
        dirs = data_dirs(data)
        found = next(
            (d / OPENB_DIR for d in dirs if (d / OPENB_DIR / f"{POD_PREFIX}{trace}.csv").is_file()), None
        )
        if found is None:
            looked = ", ".join(str(d / OPENB_DIR) for d in dirs)
            known = trace_names(data)
            if not known:
                raise DataError(
                    f"no openb traces found (looked in {looked}); {FETCH_HINT}", path=f"trace {trace!r}"
                )
            raise DataError(
                f"unknown trace; known traces: {', '.join(known)} (looked in {looked})",
                path=f"trace {trace!r}",
            )
        as_path, nodes = found / f"{POD_PREFIX}{trace}.csv", found / NODE_FILE
    if not nodes.is_file():
        raise DataError(
            f"node list not found (set --data-dir or ${DATA_ENV}, or {FETCH_HINT})", path=str(nodes)
        )
    return TraceFiles(name, as_path, nodes)


JOIN = "+"


def resolve_joined(trace: str, data: str | Path | None = None) -> TraceFiles:
    """`resolve_trace`, or traces joined end to end: `default+gpushare60` names the pod lists whose pods
    arrive one trace after the other (`sim.fgd.joined_workload`) on the one fleet they share.

    The parts must run on the same node list (the same file, or files with the same content); openb's
    traces all do. The result's `pods` is the first part's list, `then` the others'.
    """
    if JOIN not in trace or Path(trace).is_file():
        return resolve_trace(trace, data)
    names = trace.split(JOIN)
    if any(not n.strip() for n in names):
        raise DataError(f"an empty part; join traces as NAME{JOIN}NAME", path=f"trace {trace!r}")
    parts = [resolve_trace(n.strip(), data) for n in names]
    first = parts[0]
    for part in parts[1:]:
        if (
            part.nodes.resolve() != first.nodes.resolve()
            and part.nodes.read_bytes() != first.nodes.read_bytes()
        ):
            raise DataError(
                f"cannot join {first.name} and {part.name}: they run on different node lists "
                f"({first.nodes} and {part.nodes})",
                path=f"trace {trace!r}",
            )
    name = JOIN.join(p.name for p in parts)
    return TraceFiles(name, first.pods, first.nodes, tuple(p.pods for p in parts[1:]))


def load_published(trace: str, data: str | Path | None = None) -> dict[str, dict[int, float]]:
    """Published unallocated GPU % per policy and arrived %, for one trace name (empty if none)."""
    path = next((d / PUBLISHED_FILE for d in data_dirs(data) if (d / PUBLISHED_FILE).is_file()), None)
    if path is None:
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
