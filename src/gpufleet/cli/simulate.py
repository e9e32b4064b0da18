"""`gpufleet simulate`: replays a job-level trace through the embedded control plane on a virtual clock."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.api.errors import ValidationError
from gpufleet.sim.options import (
    parse_checkpoint_interval,
    parse_duration,
    parse_failures,
    parse_slowdown,
    parse_spot,
)

if TYPE_CHECKING:
    from rich.console import Console

    from gpufleet.sim.jobsim import SimProgress
    from gpufleet.sim.philly import Trace

DEFAULT_GPUS = 2048

__all__ = ["parse_duration", "parse_failures", "parse_spot", "register", "simulate"]


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    trace: Annotated[
        str, typer.Option("--trace", help="philly (found as `bench fgd` finds its traces) or a CSV path.")
    ] = "philly",
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus", help="A fleet of N GPUs in 8-GPU H100 nodes, 32 nodes a rack [default: 2048]."
        ),
    ] = None,
    fleet: Annotated[Path | None, typer.Option("--fleet", help="A YAML file of GPUPools instead.")] = None,
    queues: Annotated[
        Path | None,
        typer.Option(
            "--queues",
            help="A YAML file of Queues; the trace's clusters go to queues named vc-<cluster> "
            "[default: one per cluster, nominal quota by GPU demand].",
        ),
    ] = None,
    days: Annotated[
        float | None, typer.Option("--days", help="Jobs submitted in this many days [default: all].")
    ] = None,
    start_day: Annotated[
        float | None,
        typer.Option(
            "--start-day",
            help="Days after the trace's first submission to start at [default: its first busy day].",
        ),
    ] = None,
    failures: Annotated[
        str | None,
        typer.Option(
            "--failures",
            help="mtbf=DURATION[,node-mtbf=DURATION]: GPU failures and node losses at these fleet MTBFs.",
        ),
    ] = None,
    spot: Annotated[
        str | None,
        typer.Option(
            "--spot",
            help="interruptions-per-day=N: each spot node is taken back N times a day, with two minutes' "
            "notice (with --gpus, the fleet becomes spot).",
        ),
    ] = None,
    checkpoint_interval: Annotated[
        str | None,
        typer.Option("--checkpoint-interval", help="Every job checkpoints this often (e.g. 30m)."),
    ] = None,
    restart_time: Annotated[
        str | None,
        typer.Option(
            "--restart-time",
            help="Every start and restart of a pod takes this long before it computes (container start, "
            "checkpoint load), its GPUs held meanwhile (e.g. 5m) [default: 0].",
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="gpufleet (a queue per virtual cluster, gpufleet's defaults), fifo (one queue, "
            "strict FIFO, no preemption) or las (one queue, Tiresias' discretised least attained service) "
            "[default: gpufleet].",
        ),
    ] = None,
    gang_slowdown: Annotated[
        str | None,
        typer.Option(
            "--gang-slowdown",
            help="LEVEL=FACTOR,...: a gang whose pods span domains of a topology level (rack, block, "
            "host) computes FACTOR times slower, e.g. rack=1.3,block=2 [default: none].",
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Run each CONFIG file (policy, queues, checkpointInterval, failures, spot, placement, "
            "gangSlowdown) on the same trace, fleet and seed, and report them side by side.",
        ),
    ] = False,
    configs: Annotated[
        list[Path] | None,
        typer.Argument(metavar="[CONFIG.yaml]...", help="With --compare: the configurations to run."),
    ] = None,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            help="With --compare: run at most this many configurations at once, each in a process of "
            "its own (each holds its own simulated world in memory) [default: one per CPU core, at "
            "most one per configuration].",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault draws.")] = 0,
    keep_events: Annotated[
        bool,
        typer.Option(
            "--keep-events",
            help="Keep the Events the controllers record in the --state-dir store (by default each is "
            "validated, counted by reason and dropped: nothing in a simulation reads them, and they cost "
            "time and memory).",
        ),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            metavar="DIR",
            help="Keep the simulated world in a SQLite store in DIR (with --compare, DIR/<run name>), to "
            "look at with `gpufleet up --state DIR --no-runtime` and `gpufleet get ... --state DIR`; "
            "DIR must not hold a gpufleet state yet.",
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write report.md and PNG plots to this directory.")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Where traces are looked for.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The summary as one JSON object.")] = False,
) -> None:
    """Replays a job-level trace (submit time, duration, GPUs, virtual cluster -> queue) through the
    same controllers and scheduling core as `gpufleet up`, on a virtual clock; every job runs until
    its work is done. Prints JCT, queueing delay, utilisation and goodput."""
    from rich.console import Console

    from gpufleet.cli import simstate
    from gpufleet.sim import jobfleet, jobreport, jobsim, philly

    if gpus is not None and fleet is not None:
        raise ValidationError("give --gpus or --fleet, not both", obj="--gpus")
    if days is not None and (not math.isfinite(days) or days <= 0):
        raise ValidationError(f"must be a positive number of days, got {days}", obj="--days")
    if start_day is not None and (not math.isfinite(start_day) or start_day < 0):
        raise ValidationError(f"must be zero or more days, got {start_day}", obj="--start-day")
    if seed < 0:
        raise ValidationError(f"must be zero or more, got {seed}", obj="--seed")
    if report is not None:  # before the run: a refusal after it would throw hours of simulation away
        simstate.check_writable(report, "--report")
    if keep_events and state_dir is None:
        # An error, not a warning: without a state directory the kept Events die with the in-memory
        # store, so the flag would only make the run slower.
        raise ValidationError(
            "Events are kept only in a state directory: give --state-dir DIR", obj="--keep-events"
        )
    if compare or configs:
        per_run = {
            "--policy": policy,
            "--queues": queues,
            "--failures": failures,
            "--spot": spot,
            "--checkpoint-interval": checkpoint_interval,
            "--gang-slowdown": gang_slowdown,
            "--restart-time": restart_time,
        }
        given = [name for name, value in per_run.items() if value is not None]
        if not compare or not configs:
            raise ValidationError("give --compare and one or more configuration files", obj="--compare")
        if processes is not None and processes < 1:
            raise ValidationError(f"must be at least 1, got {processes}", obj="--processes")
        if given:
            raise ValidationError(
                f"with --compare, {', '.join(given)} belong in the configuration files", obj=given[0]
            )
        _compare(
            trace,
            configs,
            gpus=gpus,
            fleet=fleet,
            days=days,
            start_day=start_day,
            seed=seed,
            report=report,
            data_dir=data_dir,
            as_json=as_json,
            keep_events=keep_events,
            state_dir=state_dir,
            processes=processes,
        )
        return
    if processes is not None:
        raise ValidationError("runs the configurations of --compare; a single run has one", obj="--processes")
    policy = policy or "gpufleet"
    if policy not in jobfleet.POLICIES:
        raise ValidationError(
            f"unknown policy {policy!r}; known: {', '.join(jobfleet.POLICIES)}", obj="--policy"
        )
    if policy != "gpufleet" and queues is not None:
        raise ValidationError(f"the {policy} baseline has its own queue; leave out --queues", obj="--policy")
    gpu_mtbf, node_mtbf = parse_failures(failures) if failures else (None, None)
    options = jobsim.SimOptions(
        policy=policy,
        checkpoint_interval=(parse_checkpoint_interval(checkpoint_interval) if checkpoint_interval else None),
        gpu_mtbf_seconds=gpu_mtbf,
        node_mtbf_seconds=node_mtbf,
        restart_seconds=parse_duration(restart_time, "--restart-time") if restart_time else 0.0,
        spot_interruptions_per_day=parse_spot(spot) if spot else 0.0,
        seed=seed,
        gang_slowdown=parse_slowdown(gang_slowdown) if gang_slowdown else {},
        keep_events=keep_events,
    )
    if state_dir is not None:  # before the trace is read: a refusal should not wait for it
        simstate.check_fresh(state_dir)
    err = Console(stderr=True, highlight=False, emoji=False)
    loaded = philly.load(philly.resolve(trace, data_dir))
    pools = (
        jobfleet.load_pools(fleet)
        if fleet is not None
        else jobfleet.fleet_of_gpus(DEFAULT_GPUS if gpus is None else gpus, spot=spot is not None)
    )
    # before the queues, whose quotas are shares of the window's demand
    begin, window = _trace_window(loaded, start_day, days)
    jobfleet.check_runnable(window.jobs, pools, "--fleet" if fleet is not None else "--gpus")
    queue_objs = jobfleet.queues_for(policy, pools, window, queues)
    with _progress_bar(err) as meter:
        result = jobsim.simulate(
            loaded,
            pools,
            queue_objs,
            begin=begin,
            days=days,
            options=options,
            state_dir=state_dir,
            progress=err.print,
            meter=meter,
        )
    summary = jobreport.summarise(result)
    if as_json:
        typer.echo(json.dumps(simstate.summary_json(summary, result)))
    else:
        out = Console(highlight=False, soft_wrap=True, emoji=False)
        s = summary
        left_out = f", {s.unplaceable} the fleet cannot run left out" if s.unplaceable else ""
        jobs = f"{s.jobs} job{'' if s.jobs == 1 else 's'}"
        out.print(
            f"{jobs} ({s.finished} finished{left_out}) on {result.capacity} GPUs, "
            f"{(result.end - result.begin) / 3600:.1f} h virtual in {s.wall_seconds:.1f} s wall "
            f"(fleet figures over the {s.span_hours:.1f} h submission window)"
        )
        h = jobreport.hours
        out.print(f"JCT mean {h(s.jct_mean)}, p50 {h(s.jct_p50)}, p99 {h(s.jct_p99)}")
        out.print(f"queueing delay mean {h(s.wait_mean)}, p50 {h(s.wait_p50)}, p99 {h(s.wait_p99)}")
        out.print(
            f"utilisation {s.utilisation:.1%}, goodput {s.goodput:.1%}, restarts {s.restarts}, "
            f"lost {s.lost_gpu_hours:.1f} GPU-h"
        )
    if report is not None:
        command = "gpufleet " + shlex.join(sys.argv[1:]) if sys.argv else "gpufleet simulate"
        with simstate.writing(report, "--report"):
            files = jobreport.write_report(result, report, title=f"Simulation of {trace}", command=command)
        err.print(f"report: {files[0]}")
    if state_dir is not None:
        err.print(simstate.hint(state_dir), soft_wrap=True)


@contextlib.contextmanager
def _progress_bar(err: Console) -> Iterator[Callable[[SimProgress], None] | None]:
    """On a terminal, a bar of the jobs finished with the simulated day reached; elsewhere (a log, a
    pipe) none, and the run prints a line every 10 s instead."""
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("simulated day {task.fields[day]:.2f}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs finished"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("simulate", total=None, day=0.0)

        def update(at: SimProgress) -> None:
            bar.update(task, completed=at.finished, total=at.jobs, day=at.day)

        yield update


def _trace_window(loaded: Trace, start_day: float | None, days: float | None) -> tuple[float, Trace]:
    """Where the run starts (seconds after the trace's first submission) and the jobs it replays. An
    empty window is refused with where the trace's submissions are, naming `--start-day` when it
    starts after the last one, `--days` when it ends before the next."""
    begin = start_day * 86400.0 if start_day is not None else loaded.busy_start()
    window = loaded.window(begin, days)
    if not window.jobs:
        past_end = all(job.submit < begin for job in loaded.jobs)
        raise ValidationError(
            f"no job of the trace is submitted in the window ({loaded.nearest_submissions(begin, days)})",
            obj="--start-day" if past_end and start_day is not None else "--days",
        )
    return begin, window


def _compare(
    trace: str,
    configs: list[Path],
    *,
    gpus: int | None,
    fleet: Path | None,
    days: float | None,
    start_day: float | None,
    seed: int,
    report: Path | None,
    data_dir: Path | None,
    as_json: bool = False,
    keep_events: bool = False,
    state_dir: Path | None = None,
    processes: int | None = None,
) -> None:
    """`--compare`: every configuration checked (files, fields, queues) before the first run starts."""
    from rich.console import Console

    from gpufleet.cli import simstate
    from gpufleet.sim import compare, jobfleet, jobreport, philly, workers

    specs = compare.load_configs(configs, seed=seed)
    loaded = philly.load(philly.resolve(trace, data_dir))
    begin, window = _trace_window(loaded, start_day, days)
    planned = []
    for spec in specs:
        pools = (
            jobfleet.load_pools(fleet)
            if fleet is not None
            else jobfleet.fleet_of_gpus(DEFAULT_GPUS if gpus is None else gpus, spot=spec.spot)
        )
        jobfleet.check_runnable(window.jobs, pools, "--fleet" if fleet is not None else "--gpus")
        planned.append((spec, pools, compare.queues_of(spec, pools, window)))
    dirs = simstate.run_dirs(state_dir, [spec.name for spec in specs]) if state_dir is not None else {}
    err = Console(stderr=True, highlight=False, emoji=False)
    at_once = min(len(planned), workers.usable_cpus() if processes is None else processes)
    paths = {spec.name: spec.path for spec in specs}
    tasks = []
    for spec, pools, queue_objs in planned:
        run = compare.PlannedRun(
            trace=loaded,
            pools=pools,
            queues=queue_objs,
            begin=begin,
            days=days,
            options=dataclasses.replace(spec.options, keep_events=keep_events),
            state_dir=dirs.get(spec.name),
        )
        tasks.append(workers.Task(spec.name, run))
    if at_once > 1:
        err.print(f"{at_once} runs at once, each in a process of its own", markup=False)
    results = workers.run_all(
        tasks,
        processes=at_once,
        # Side by side, each line says whose it is.
        progress=lambda name, line: err.print(f"{name}: {line}" if at_once > 1 else line, markup=False),
        starting=lambda name: err.print(f"run {name} ({paths[name]})", markup=False),
    )
    runs = [(spec, result) for (spec, _, _), result in zip(planned, results, strict=True)]
    if as_json:  # one object per run, its name and policy first
        for spec, result in runs:
            figures = simstate.summary_json(jobreport.summarise(result), result)
            typer.echo(json.dumps({"run": spec.name, "policy": spec.policy, **figures}))
    else:
        Console(highlight=False, soft_wrap=True, emoji=False).print(compare.table(runs))
    if report is not None:
        command = "gpufleet " + shlex.join(sys.argv[1:]) if sys.argv else "gpufleet simulate --compare"
        with simstate.writing(report, "--report"):
            files = compare.write_comparison(runs, report, title=f"Comparison on {trace}", command=command)
        err.print(f"report: {files[0]}")
    for directory in dirs.values():
        err.print(simstate.hint(directory), soft_wrap=True)
