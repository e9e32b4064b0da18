"""What a job-level simulation measured, as figures, a markdown report and PNG plots.

Definitions (docs/simulation.md):
- JCT: completion minus submission; queueing delay: first start minus submission (virtual seconds).
- Utilisation: GPUs held by pods (bound, whether started or not) over the fleet's GPUs.
- Goodput: GPU-seconds of work kept, over the fleet's GPU-seconds: GPUs of running pods, minus the
  GPU-seconds an eviction threw away (work since the last checkpoint), counted in the hour it was lost.
- A queue's share: its part of all GPU-seconds held; its entitlement: its nominal quota's part of all
  nominal quota.
- Idle GPU-hours per pool: the pool's GPUs over the window less what pods held on its nodes; their
  cost, and each queue's, at each pool's own `pricePerGPUHour`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.sim.jobsim import SimResult


@dataclass(frozen=True, slots=True)
class Summary:
    jobs: int
    finished: int
    unplaceable: int
    jct_mean: float
    jct_p50: float
    jct_p99: float
    wait_mean: float
    wait_p50: float
    wait_p99: float
    utilisation: float
    goodput: float
    restarts: int
    lost_gpu_hours: float
    idle_gpu_hours: float
    idle_cost: float
    span_hours: float
    wall_seconds: float
    fragmented: float
    """Mean free GPUs on partly used nodes, as a fraction of the fleet, over the window."""


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def jcts(result: SimResult) -> np.ndarray:
    return np.array([r.end - r.submit for r in result.jobs.values() if r.end is not None])


def waits(result: SimResult) -> np.ndarray:
    return np.array([r.start - r.submit for r in result.jobs.values() if r.start is not None])


def utilisation_series(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(utilisation, goodput) per bucket, as fractions of the fleet."""
    n, cap = result.buckets, result.capacity
    allocated = result.series.means("allocated", n) / cap
    running = result.series.means("running", n)
    lost = result.series.means("lost", n)
    goodput = np.clip(running - lost, 0.0, None) / cap
    return allocated, goodput


def pool_rows(result: SimResult) -> list[tuple[str, int, float, float, float, float]]:
    """Per pool, over the submission window: (name, GPUs, price per GPU-hour, GPU-hours held, idle
    GPU-hours, idle cost at the pool's price)."""
    n = window_buckets(result)
    width = result.series.width
    span_hours = n * width / 3600
    rows = []
    for pool in result.pools:
        gpus = pool.spec.nodes * pool.spec.gpus_per_node
        price = pool.spec.price_per_gpu_hour
        held = float(result.series.means(f"held@{pool.name}", n).sum()) * width / 3600
        idle = max(0.0, gpus * span_hours - held)
        rows.append((pool.name, gpus, price, held, idle, idle * price))
    return rows


def queue_cost(result: SimResult, queue: str) -> float:
    """What the GPU-hours a queue held over the window cost, each at the price of the pool it was in."""
    n = window_buckets(result)
    hours = result.series.width / 3600
    return sum(
        float(result.series.means(f"held:{queue}@{p.name}", n).sum()) * hours * p.spec.price_per_gpu_hour
        for p in result.pools
    )


def queue_lengths(result: SimResult) -> dict[str, tuple[float, float]]:
    """Per queue, over the window: (mean jobs waiting, the largest hourly mean)."""
    n = window_buckets(result)
    out = {}
    for queue in sorted({r.queue for r in result.jobs.values()}):
        waiting = result.series.means(f"pending:{queue}", n)
        out[queue] = (float(waiting.mean()), float(waiting.max()))
    return out


def price_per_gpu_hour(result: SimResult) -> float:
    gpus = result.capacity
    return sum(p.spec.price_per_gpu_hour * p.spec.nodes * p.spec.gpus_per_node for p in result.pools) / gpus


def window_buckets(result: SimResult) -> int:
    """Buckets of the submission window (the fleet-wide figures are taken over it, not over the
    drain after it, when the last long jobs run on an otherwise empty fleet)."""
    return max(1, math.ceil((result.window_end - result.begin) / result.series.width))


def summarise(result: SimResult) -> Summary:
    j, w = jcts(result), waits(result)
    n = window_buckets(result)
    span = n * result.series.width
    allocated_gs = float(result.series.means("allocated", n).sum() * result.series.width)
    running_gs = float(result.series.means("running", n).sum() * result.series.width)
    lost_gs = float(result.series.means("lost", n).sum() * result.series.width)
    fleet_gs = result.capacity * span
    idle = max(0.0, fleet_gs - allocated_gs) / 3600
    return Summary(
        jobs=len(result.jobs),
        finished=len(j),
        unplaceable=len(result.unplaceable),
        jct_mean=float(j.mean()) if len(j) else float("nan"),
        jct_p50=_pct(j, 50),
        jct_p99=_pct(j, 99),
        wait_mean=float(w.mean()) if len(w) else float("nan"),
        wait_p50=_pct(w, 50),
        wait_p99=_pct(w, 99),
        utilisation=allocated_gs / fleet_gs if fleet_gs else 0.0,
        goodput=max(0.0, running_gs - lost_gs) / fleet_gs if fleet_gs else 0.0,
        restarts=sum(r.restarts for r in result.jobs.values()),
        lost_gpu_hours=sum(r.lost_gpu_seconds for r in result.jobs.values()) / 3600,
        idle_gpu_hours=idle,
        idle_cost=sum(row[5] for row in pool_rows(result)),
        span_hours=span / 3600,
        wall_seconds=result.wall_seconds,
        fragmented=float(result.series.means("fragmented", n).mean()) / result.capacity,
    )


def queue_shares(result: SimResult) -> list[tuple[str, float, float, int, float, float]]:
    """Per leaf queue, over the window: (name, share of GPU-seconds held, entitlement, jobs, mean JCT,
    GPU-hours held)."""
    nominal: dict[str, float] = {}
    for queue in result.queues:
        if queue.spec.quotas:
            nominal[queue.name] = float(sum(q.nominal for q in queue.spec.quotas.values()))
    n = window_buckets(result)
    held = {q: float(result.series.means(f"allocated:{q}", n).sum()) for q in nominal}
    total_held = sum(held.values()) or 1.0
    total_nominal = sum(nominal.values()) or 1.0
    rows = []
    for name in sorted(nominal):
        done = [r.end - r.submit for r in result.jobs.values() if r.queue == name and r.end is not None]
        count = sum(1 for r in result.jobs.values() if r.queue == name)
        rows.append(
            (
                name,
                held[name] / total_held,
                nominal[name] / total_nominal,
                count,
                float(np.mean(done)) if done else float("nan"),
                held[name] * result.series.width / 3600,
            )
        )
    return rows


def hours(seconds: float, unit: str = " h") -> str:
    """Seconds as hours; `-` where there is no figure (no job finished, so no JCT)."""
    return f"{seconds / 3600:.2f}{unit}" if math.isfinite(seconds) else "-"


def markdown(result: SimResult, title: str, command: str) -> str:
    s = summarise(result)
    jobs = f"{s.jobs} job{'' if s.jobs == 1 else 's'}"
    lines = [
        f"# {title}",
        "",
        f"Command: `{command}`",
        "",
        f"{jobs} submitted ({s.finished} finished, {s.unplaceable} the fleet cannot run left out) "
        f"on {result.capacity} GPUs; the last finished {(result.end - result.begin) / 3600:.1f} h of virtual "
        f"time after the window began; {s.wall_seconds:.1f} s of wall time. Utilisation, goodput and idle "
        f"GPU-hours are over the submission window ({s.span_hours:.1f} h); JCT and delays over every job.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| JCT mean / p50 / p99 | {hours(s.jct_mean)} / {hours(s.jct_p50)} / {hours(s.jct_p99)} |",
        f"| queueing delay mean / p50 / p99 | {hours(s.wait_mean)} / {hours(s.wait_p50)} / "
        f"{hours(s.wait_p99)} |",
        f"| utilisation (GPUs held) | {s.utilisation:.1%} |",
        f"| goodput (work kept) | {s.goodput:.1%} |",
        f"| restarts (every job) | {s.restarts} |",
        f"| GPU-hours lost to evictions (every job) | {s.lost_gpu_hours:,.1f} |",
        f"| idle GPU-hours / their cost | {s.idle_gpu_hours:,.1f} / ${s.idle_cost:,.0f} |",
        f"| free GPUs on partly used nodes (mean) | {s.fragmented:.1%} of the fleet |",
        f"| faults | {', '.join(f'{k} {v}' for k, v in sorted(result.faults.items())) or 'none'} |",
        "",
        "![utilisation and goodput](utilisation.png)",
        "",
        "![queue length](queue.png)",
        "",
        "![fragmentation](fragmentation.png)",
        "",
        "![JCT CDF](jct_cdf.png)",
        "",
        "## Queues: share of GPU time against entitlement",
        "",
        "| queue | jobs | share | entitlement | mean JCT | jobs waiting mean / peak hour | GPU-hours held | "
        "their cost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lengths = queue_lengths(result)
    for name, share, entitled, count, mean, held in queue_shares(result):
        waiting, peak = lengths.get(name, (0.0, 0.0))
        lines.append(
            f"| {name} | {count} | {share:.1%} | {entitled:.1%} | {hours(mean)} | "
            f"{waiting:.1f} / {peak:.1f} | {held:,.1f} | ${queue_cost(result, name):,.0f} |"
        )
    lines += [
        "",
        "![shares](shares.png)",
        "",
        "## Pools: idle GPU-hours and their cost",
        "",
        "| pool | GPUs | price per GPU-hour | GPU-hours held | idle GPU-hours | idle cost |",
        "|---|---|---|---|---|---|",
    ]
    for pool, gpus, price, held, idle, cost in pool_rows(result):
        lines.append(f"| {pool} | {gpus} | ${price:,.2f} | {held:,.1f} | {idle:,.1f} | ${cost:,.0f} |")
    lines.append("")
    return "\n".join(lines)


def write_report(result: SimResult, folder: str | Path, *, title: str, command: str) -> list[Path]:
    """report.md and its plots in `folder` (created); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    hours = np.arange(result.buckets) * result.series.width / 3600

    util, good = utilisation_series(result)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    frag = result.series.means("fragmented", result.buckets) / result.capacity
    ax.plot(hours, (1 - util) * 100, label="free GPUs", color="grey", linewidth=0.8)
    ax.plot(hours, frag * 100, label="free GPUs on partly used nodes")
    ax.set_xlabel("hours")
    ax.set_ylabel("% of the fleet")
    ax.set_ylim(0, 105)
    ax.legend(loc="upper right")
    written.append(_save(fig, out / "fragmentation.png"))

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(hours, util * 100, label="utilisation (GPUs held)")
    ax.plot(hours, good * 100, label="goodput (work kept)")
    ax.set_xlabel("hours")
    ax.set_ylabel("% of the fleet")
    ax.set_ylim(0, 105)
    ax.axvline(
        (result.window_end - result.begin) / 3600,
        color="grey",
        linestyle=":",
        label="end of the submission window",
    )
    ax.legend(loc="upper right")
    written.append(_save(fig, out / "utilisation.png"))

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(hours, result.series.means("pending", result.buckets), label="all queues", color="black")
    for queue in queue_lengths(result):
        ax.plot(hours, result.series.means(f"pending:{queue}", result.buckets), label=queue, linewidth=0.8)
    ax.set_xlabel("hours")
    ax.set_ylabel("jobs submitted, not started")
    ax.legend(loc="upper right", fontsize=6, ncol=2)
    written.append(_save(fig, out / "queue.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    values = np.sort(jcts(result)) / 3600
    if len(values):
        ax.plot(values, np.arange(1, len(values) + 1) / len(values))
        ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log)")
    ax.set_ylabel("fraction of jobs")
    written.append(_save(fig, out / "jct_cdf.png"))

    rows = queue_shares(result)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r[1] * 100 for r in rows], 0.4, label="share")
    ax.bar(x + 0.2, [r[2] * 100 for r in rows], 0.4, label="entitlement")
    ax.set_xticks(x, [r[0] for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("% of GPU time / quota")
    ax.legend()
    written.append(_save(fig, out / "shares.png"))

    report = out / "report.md"
    report.write_text(markdown(result, title, command), encoding="utf-8")
    return [report, *written]


def _save(fig: object, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()  # type: ignore[attr-defined]
    fig.savefig(path, dpi=100)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path
