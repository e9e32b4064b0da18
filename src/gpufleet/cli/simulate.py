"""`gpufleet simulate`: replays a job-level trace through the embedded control plane on a virtual clock."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.api.errors import ValidationError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str) -> float:
    """`90`, `90s`, `30m`, `2h`, `7d` (seconds; a number and one unit), > 0."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise ValidationError(
            f"must be a positive duration such as 90s, 30m, 2h or 7d, got {text!r}", obj=option
        )
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def parse_failures(text: str) -> tuple[float | None, float | None]:
    """`mtbf=DURATION[,node-mtbf=DURATION]`: the fleet's mean times between GPU failures and between
    node losses, in seconds."""
    found: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("mtbf", "node-mtbf") or key in found:
            raise ValidationError(
                f"expected mtbf=DURATION and/or node-mtbf=DURATION (e.g. mtbf=2h,node-mtbf=3d), got {text!r}",
                obj="--failures",
            )
        found[key] = parse_duration(value, f"--failures {key}")
    return found.get("mtbf"), found.get("node-mtbf")


def parse_spot(text: str) -> float:
    """`interruptions-per-day=N`: interruptions of each spot node per day."""
    key, sep, value = text.partition("=")
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if not sep or key.strip() != "interruptions-per-day" or not math.isfinite(rate) or rate < 0:
        raise ValidationError(f"expected interruptions-per-day=N with N >= 0, got {text!r}", obj="--spot")
    return rate


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
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="gpufleet (a queue per virtual cluster, gpufleet's defaults), fifo (one queue, "
            "strict FIFO, no preemption) or las (one queue, Tiresias' discretised least attained service).",
        ),
    ] = "gpufleet",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault draws.")] = 0,
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

    from gpufleet.sim import jobfleet, jobreport, jobsim, philly

    if gpus is not None and fleet is not None:
        raise ValidationError("give --gpus or --fleet, not both", obj="--gpus")
    if days is not None and (not math.isfinite(days) or days <= 0):
        raise ValidationError(f"must be a positive number of days, got {days}", obj="--days")
    if start_day is not None and (not math.isfinite(start_day) or start_day < 0):
        raise ValidationError(f"must be zero or more days, got {start_day}", obj="--start-day")
    if policy not in jobfleet.POLICIES:
        raise ValidationError(
            f"unknown policy {policy!r}; known: {', '.join(jobfleet.POLICIES)}", obj="--policy"
        )
    if policy != "gpufleet" and queues is not None:
        raise ValidationError(f"the {policy} baseline has its own queue; leave out --queues", obj="--policy")
    gpu_mtbf, node_mtbf = parse_failures(failures) if failures else (None, None)
    options = jobsim.SimOptions(
        policy=policy,
        checkpoint_interval=(
            parse_duration(checkpoint_interval, "--checkpoint-interval") if checkpoint_interval else None
        ),
        gpu_mtbf_seconds=gpu_mtbf,
        node_mtbf_seconds=node_mtbf,
        spot_interruptions_per_day=parse_spot(spot) if spot else 0.0,
        seed=seed,
    )
    err = Console(stderr=True, highlight=False, emoji=False)
    loaded = philly.load(philly.resolve(trace, data_dir))
    pools = (
        jobfleet.load_pools(fleet)
        if fleet is not None
        else jobfleet.fleet_of_gpus(gpus or 2048, spot=spot is not None)
    )
    begin = start_day * 86400.0 if start_day is not None else loaded.busy_start()
    window = loaded.window(begin, days)
    baseline = jobfleet.baseline_queues(policy, pools)
    if baseline is not None:
        queue_objs = baseline
    elif queues is not None:
        queue_objs = jobfleet.load_queues(queues)
        names = {q.name for q in queue_objs}
        missing = sorted({jobfleet.queue_name(c) for c in window.clusters} - names)
        if missing:
            raise ValidationError(f"no queue for the trace's clusters: {', '.join(missing)}", obj=str(queues))
    else:
        queue_objs = jobfleet.trace_queues(window.gpu_demand() or {c: 1.0 for c in window.clusters}, pools)
    if not window.jobs:
        raise ValidationError("no job of the trace is submitted in the window", obj="--days")
    result = jobsim.simulate(
        loaded, pools, queue_objs, begin=begin, days=days, options=options, progress=err.print
    )
    summary = jobreport.summarise(result)
    if as_json:
        typer.echo(json.dumps({k: getattr(summary, k) for k in summary.__slots__}))
    else:
        out = Console(highlight=False, soft_wrap=True, emoji=False)
        s = summary
        out.print(
            f"{s.jobs} jobs ({s.finished} finished) on {result.capacity} GPUs, "
            f"{(result.end - result.begin) / 3600:.1f} h virtual in {s.wall_seconds:.1f} s wall "
            f"(fleet figures over the {s.span_hours:.1f} h submission window)"
        )
        out.print(
            f"JCT mean {s.jct_mean / 3600:.2f} h, p50 {s.jct_p50 / 3600:.2f} h, p99 {s.jct_p99 / 3600:.2f} h"
        )
        out.print(
            f"queueing delay mean {s.wait_mean / 3600:.2f} h, p50 {s.wait_p50 / 3600:.2f} h, "
            f"p99 {s.wait_p99 / 3600:.2f} h"
        )
        out.print(
            f"utilisation {s.utilisation:.1%}, goodput {s.goodput:.1%}, restarts {s.restarts}, "
            f"lost {s.lost_gpu_hours:.1f} GPU-h"
        )
    if report is not None:
        command = "gpufleet " + shlex.join(sys.argv[1:]) if sys.argv else "gpufleet simulate"
        files = jobreport.write_report(result, report, title=f"Simulation of {trace}", command=command)
        err.print(f"report: {files[0]}")
