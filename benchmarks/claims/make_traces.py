"""Writes the synthetic job traces of the production-claim experiments (benchmarks/claims/README.md).

Each trace is a CSV in the format `gpufleet simulate --trace PATH` reads (timestamp, duration,
num_gpus, cluster; an optional `mig` column), drawn from a fixed seed, so the files are the same on
every machine. Run from the repository root: `.venv/bin/python benchmarks/claims/make_traces.py`
(writes into benchmarks/claims/traces/).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

START = datetime(2026, 1, 5, tzinfo=UTC)
"""The traces' first submission (any date works: the simulator runs on the trace's own clock)."""
GPUS_PER_NODE = 8

Row = tuple[float, float, int, str, str]
"""(seconds after START, duration seconds, GPUs, cluster, MIG profile or '')."""


def failures_trace(
    days: float = 0.5, fleet_gpus: int = 25_000, job_gpus: int = 4096, spare_nodes: int = 5
) -> list[Row]:
    """Claim (a): a 25,000-GPU fleet full of large pretraining gangs, plus fill jobs.

    `fleet_gpus // job_gpus` gangs of `job_gpus` GPUs (cluster `train`) arrive at once and compute
    for the whole window plus half an hour, so none finishes inside it. The nodes they leave, less
    `spare_nodes` hot spares, are kept busy by 8-GPU fill jobs of 6 h (cluster `fill`, whose queue's
    quota is those nodes: failures-queues.yaml), a backlog arriving at the start, enough for the
    window and a tenth more."""
    rows: list[Row] = []
    gangs = fleet_gpus // job_gpus
    for _ in range(gangs):
        rows.append((0.0, days * 86400 + 1800, job_gpus, "train", ""))
    fill_nodes = (fleet_gpus - gangs * job_gpus) // GPUS_PER_NODE - spare_nodes
    fill = round(fill_nodes * (days * 24 / 6) * 1.1)
    rows += [(1.0, 6 * 3600.0, GPUS_PER_NODE, "fill", "")] * fill
    return rows


GANG_SIZES = (1, 2, 4, 8, 16, 32, 64)
GANG_WEIGHTS = (0.40, 0.10, 0.10, 0.20, 0.10, 0.07, 0.03)


def gang_trace(
    days: float = 2.0,
    fleet_gpus: int = 256,
    load: float = 1.1,
    seed: int = 16,
    sizes: tuple[int, ...] = GANG_SIZES,
) -> list[Row]:
    """Claim (b): a mix of jobs from 1 GPU to 8-node gangs arriving as a Poisson stream that offers
    `load` times the fleet's GPU-hours, so a queue stays and utilisation is the policy's doing.
    Sizes 1/2/4/8/16/32/64 GPUs at 40/10/10/20/10/7/3%; durations log-normal, median 1 h, sigma 1,
    clipped to [2 min, 24 h]; each job belongs to one of four tenants.
    `sizes` replaces the GPU counts, one for each weight: sizes 8x larger on an 8x larger fleet draw
    the same stream (the rate depends on fleet_gpus / mean size), each job 8x larger."""
    if len(sizes) != len(GANG_WEIGHTS):
        raise ValueError(f"gang_trace: sizes needs {len(GANG_WEIGHTS)} GPU counts, got {len(sizes)}")
    rng = np.random.default_rng(seed)
    mean_gpus = float(np.dot(sizes, GANG_WEIGHTS))
    mean_hours = float(np.exp(0.5))  # mean of the unclipped log-normal, median 1 h, sigma 1
    rate = load * fleet_gpus / (mean_gpus * mean_hours * 3600)  # jobs per second
    rows: list[Row] = []
    t = 0.0
    while True:
        t += float(rng.exponential(1 / rate))
        if t >= days * 86400:
            return rows
        gpus = int(rng.choice(sizes, p=GANG_WEIGHTS))
        hours = float(np.clip(rng.lognormal(0.0, 1.0), 2 / 60, 24))
        rows.append((t, hours * 3600, gpus, f"t{int(rng.integers(4))}", ""))


def without_gangs(rows: Iterable[Row]) -> list[Row]:
    """The same work with no gang constraint: a job of more than a node's GPUs becomes independent
    jobs of one node each, same duration, same GPU-seconds."""
    out: list[Row] = []
    for t, duration, gpus, cluster, mig in rows:
        if gpus <= GPUS_PER_NODE:
            out.append((t, duration, gpus, cluster, mig))
        else:
            out += [(t, duration, GPUS_PER_NODE, cluster, mig)] * (gpus // GPUS_PER_NODE)
    return out


MIG_ONLY_1G = (("1g.10gb", 1.0),)
"""Claim (c), the best case: every small inference job fits the smallest instance."""
MIG_MIX = (("1g.10gb", 0.50), ("2g.20gb", 0.25), ("3g.40gb", 0.25))
"""Claim (c), a mixed case: small inference jobs by the MIG instance each needs (compute and memory)."""


def mig_trace(
    hours: float = 8.0,
    jobs_per_hour: float = 150.0,
    mix: tuple[tuple[str, float], ...] = MIG_ONLY_1G,
    seed: int = 16,
) -> list[Row]:
    """Claim (c): a Poisson stream of small inference jobs (batch scoring, evaluation, a model behind
    a low-traffic endpoint), each needing one MIG instance of a `mix` profile; durations log-normal,
    median 30 min, sigma 0.7 (mean 38 min), clipped to [1 min, 8 h]."""
    rng = np.random.default_rng(seed)
    profiles = [p for p, _ in mix]
    weights = [w for _, w in mix]
    rows: list[Row] = []
    t = 0.0
    while True:
        t += float(rng.exponential(3600 / jobs_per_hour))
        if t >= hours * 3600:
            return rows
        profile = str(rng.choice(profiles, p=weights))
        minutes = float(np.clip(rng.lognormal(np.log(30), 0.7), 1, 480))
        rows.append((t, minutes * 60, 1, "serve", profile))


def write(path: Path, rows: Iterable[Row], *, mig: bool = False) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["timestamp", "duration", "num_gpus", "cluster", *(["mig"] if mig else [])])
        for t, duration, gpus, cluster, profile in rows:
            stamp = (START + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")
            out.writerow([stamp, f"{duration:.0f}", gpus, cluster, *([profile] if mig else [])])
            n += 1
    return n


def main(folder: Path) -> None:
    gang = gang_trace()
    written = {
        "failures-25k.csv": write(folder / "failures-25k.csv", failures_trace()),
        "failures-25k-8192.csv": write(folder / "failures-25k-8192.csv", failures_trace(job_gpus=8192)),
        "failures-25k-7d.csv": write(folder / "failures-25k-7d.csv", failures_trace(days=7)),
        "gang.csv": write(folder / "gang.csv", gang),
        "gang-split.csv": write(folder / "gang-split.csv", without_gangs(gang)),
        "mig-1g.csv": write(folder / "mig-1g.csv", mig_trace(), mig=True),
        "mig-mix.csv": write(folder / "mig-mix.csv", mig_trace(jobs_per_hour=85.0, mix=MIG_MIX), mig=True),
    }
    for name, rows in written.items():
        print(f"{folder / name}: {rows} jobs")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "traces")
