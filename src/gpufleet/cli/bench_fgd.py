"""CLI command: gpufleet bench fgd — the FGD placement protocol on an openb trace."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpufleet.scheduler.placement.policies import POLICY_NAMES, get_policy
from gpufleet.sim import datasets
from gpufleet.sim.fgd import NODE_ORDER, TIE_BREAKS, Job, PolicySummary, RunResult, run_job, summarise
from gpufleet.sim.openb import load_nodes, load_pods
from gpufleet.sim.workers import usable_cpus

if TYPE_CHECKING:
    from gpufleet.sim.fgd_bound import BoundSummary

_R = TypeVar("_R")


def _policies(spec: str) -> list[str]:
    if spec == "all":
        return list(POLICY_NAMES)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for name in names:
        if name not in POLICY_NAMES:
            get_policy(name)  # raises GpuFleetError listing the valid names
    return names


def _run(
    jobs: list[Job],
    workers: int,
    quiet: bool,
    work: Callable[[Job], _R] = run_job,  # type: ignore[assignment]
    what: str = "FGD protocol runs",
) -> list[_R]:
    console = Console(stderr=True)
    results: list[_R] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=quiet, transient=True) as progress:
        task = progress.add_task(what, total=len(jobs))
        if workers <= 1:
            for job in jobs:
                results.append(work(job))
                progress.advance(task)
            return results
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(work, job) for job in jobs]
            for future in as_completed(futures):
                results.append(future.result())
                progress.advance(task)
    return results


def _table(
    trace: str,
    summaries: list[PolicySummary],
    published: dict[str, dict[int, float]],
    bound: BoundSummary | None,
) -> Table:
    table = Table(title=f"FGD protocol, trace {trace}: unallocated GPU % at 100% arrived (lower is better)")
    headers = ["policy", "seeds", "ours", "published", "difference", "wall s"]
    if bound is not None:
        headers += ["above bound"]
    for header in headers:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for s in summaries:
        ref = published.get(s.policy, {}).get(100)
        diff = "" if ref is None else f"{s.unallocated_pct - ref:+.2f}"
        row = [
            s.policy,
            str(s.seeds),
            f"{s.unallocated_pct:.2f} ± {s.unallocated_std:.2f}",
            "" if ref is None else f"{ref:.2f}",
            diff,
            f"{s.wall_s:.1f}",
        ]
        if bound is not None:
            row.append(f"{bound.above(s.runs):+.2f}")
        table.add_row(*row)
    if bound is not None:
        cells = [
            "lower bound",
            str(len(bound.results)),
            f"{bound.unallocated_pct:.2f} ± {bound.unallocated_std:.2f}",
        ]
        table.add_row(*cells, "", "", f"{sum(r.solve_s for r in bound.results):.1f}", "")
    return table


def fgd(
    trace: str = typer.Option(
        "default",
        help="Trace name (default, cpu050, ...) or a pod list CSV path; NAME+NAME joins traces end to end "
        "(the second's pods after the first's, each at half the protocol's 1.3 x load, on the same nodes).",
    ),
    policy: str = typer.Option("all", help="'all', a policy name, or a comma-separated list."),
    seeds: int = typer.Option(10, min=1, help="Seeds per policy (0 .. N-1)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per policy on stdout."),
    plot: Path | None = typer.Option(None, help="Write the unallocated-vs-arrived plot to this file."),
    data: Path | None = typer.Option(
        None,
        "--data-dir",
        "--data",
        help="Data directory [default: $GPUFLEET_DATA, else ../shared/data beside the repository, then the "
        "user's cache, where `gpufleet data fetch openb` puts the traces].",
    ),
    processes: int = typer.Option(
        0,
        "--processes",
        "--workers",
        help="Runs at once, each in a process of its own (0: one per usable CPU core), named as in "
        "`simulate --processes`; `--workers` is the same option.",
    ),
    tie_break: str = typer.Option(
        NODE_ORDER,
        help="Ties between equally scored nodes: 'node-order' (the paper's simulator) or 'random'.",
    ),
    bound: bool = typer.Option(
        False,
        "--bound",
        help="Also compute, per seed, a lower bound on the figure that no online policy can beat (a linear "
        "relaxation of packing the arrived pods offline, solved with HiGHS), and each policy's distance "
        "from it.",
    ),
    learn_first_only: bool = typer.Option(
        False,
        "--learn-first-only",
        help="With a joined trace, a measurement: learning policies (fgd+) learn only the first trace's "
        "pods, to show what adapting to the second one's mix is worth.",
    ),
) -> None:
    """Runs the FGD placement protocol and compares with the published figures."""
    if tie_break not in TIE_BREAKS:
        raise typer.BadParameter(f"valid: {', '.join(TIE_BREAKS)}", param_hint="--tie-break")
    if processes < 0:
        raise typer.BadParameter(
            f"must be 0 (one per usable CPU core) or more, got {processes}", param_hint="--processes"
        )
    files = datasets.resolve_joined(trace, data)
    if learn_first_only and not files.then:
        raise typer.BadParameter("needs a joined trace (NAME+NAME)", param_hint="--learn-first-only")
    names = _policies(policy)
    # Read once here so a bad file fails fast with its line and field, before any worker starts.
    load_nodes(files.nodes)
    for pods in (files.pods, *files.then):
        load_pods(pods)
    then = tuple(str(p) for p in files.then)
    jobs = [
        Job(str(files.pods), str(files.nodes), p, s, tie_break, then, learn_first_only)
        for p in names
        for s in range(seeds)
    ]
    count = processes if processes > 0 else usable_cpus()
    started = time.perf_counter()
    results: list[RunResult] = _run(jobs, min(count, len(jobs)), quiet=json_out)
    bounds: BoundSummary | None = None
    if bound:
        # Only with --bound: the solver is not even imported otherwise.
        from gpufleet.sim.fgd_bound import BoundSummary, run_bound_job

        per_seed = [Job(str(files.pods), str(files.nodes), "bound", s, then=then) for s in range(seeds)]
        work = min(count, len(per_seed))
        bounds = BoundSummary(_run(per_seed, work, json_out, run_bound_job, "FGD lower bounds"))
    elapsed = time.perf_counter() - started
    summaries = summarise(names, results)
    published = datasets.load_published(files.name, data)
    console = Console()
    if json_out:
        for s in summaries:
            ref = published.get(s.policy, {}).get(100)
            record = {
                "trace": files.name,
                "policy": s.policy,
                "seeds": s.seeds,
                "unallocated_pct": round(s.unallocated_pct, 4),
                "unallocated_std": round(s.unallocated_std, 4),
                "published_pct": ref,
                "wall_s": round(s.wall_s, 3),
            }
            if learn_first_only:
                record["learn_first_only"] = True
            if bounds is not None:
                record["bound_pct"] = round(bounds.unallocated_pct, 4)
                record["bound_std"] = round(bounds.unallocated_std, 4)
                record["above_bound"] = round(bounds.above(s.runs), 4)
                record["bound_exact"] = bounds.exact
            print(json.dumps(record))
    else:
        console.print(_table(files.name, summaries, published, bounds))
        console.print(f"{len(jobs)} runs in {elapsed:.1f} s wall ({min(count, len(jobs))} processes)")
        if bounds is not None and not bounds.exact:
            console.print("some bounds fell back on the trivial one: HiGHS found no optimum in time")
    if plot is not None:
        from gpufleet.sim.plots import plot_fgd

        written = plot_fgd(files.name, summaries, plot, published)
        Console(stderr=json_out).print(f"plot: {written}")


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("fgd")(fgd)


__all__ = ["register"]
