"""`gpufleet simulate --compare A.yaml B.yaml ...`: several configurations on one trace, fleet and seed.

A configuration file is one YAML mapping of what differs between runs (docs/simulation.md, "Comparing
configurations"); what they share (the trace and its window, the fleet, the seed) comes from the
command line, so every run replays the same jobs on the same fleet with the same fault draws:

```yaml
name: las-30m                  # the run's label (default: the file's name without .yaml)
policy: las                    # gpufleet | fifo | las
queues: queues.yaml            # gpufleet only: a Queues file, relative to this file
placement: bestfit             # the scheduler's placement policy for every workload class
checkpointInterval: 30m
restartTime: 5m                # every pod start and restart takes this long before it computes
failures: mtbf=2h,node-mtbf=3d
spot: interruptions-per-day=2
leastAttainedService: {thresholdsGpuHours: [1, 16], promoteFactor: 4}   # las only
gangSlowdown: {rack: 1.3, block: 2.0}
```

Unknown fields, bad values and options that do not fit the policy are refused with the file and the
field named, before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import pydantic
from pydantic import Field

from gpufleet.api.base import ApiModel
from gpufleet.api.documents import load_yaml
from gpufleet.api.errors import GpuFleetError, ValidationError
from gpufleet.api.pool import GPUPool
from gpufleet.api.queue import LeastAttainedService, Queue
from gpufleet.api.validation import translate_error
from gpufleet.scheduler.config import SchedulerConfig
from gpufleet.scheduler.placement.policies import POLICY_NAMES
from gpufleet.sim import jobfleet
from gpufleet.sim.jobreport import Summary, hours, jcts, price_per_gpu_hour, summarise
from gpufleet.sim.jobsim import SimOptions, SimResult, simulate
from gpufleet.sim.options import (
    check_slowdown,
    parse_checkpoint_interval,
    parse_duration,
    parse_failures,
    parse_spot,
)
from gpufleet.sim.philly import Trace

_T = TypeVar("_T")


RUN_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9 ._+=,()-]{0,38}[A-Za-z0-9)])?")
"""A run's name: it becomes a folder (never a path out of one) and a cell of a markdown table."""


class RunConfig(ApiModel):
    """One configuration file of `--compare` (camelCase in YAML)."""

    name: str | None = Field(default=None, min_length=1, max_length=40)
    policy: Literal["gpufleet", "fifo", "las"] = "gpufleet"
    queues: str | None = None
    placement: str | None = None
    checkpoint_interval: str | None = None
    restart_time: str | None = None
    failures: str | None = None
    spot: str | None = None
    least_attained_service: LeastAttainedService | None = None
    gang_slowdown: dict[str, float] | None = None


@dataclass(frozen=True, slots=True)
class RunSpec:
    """A configuration file, checked and resolved."""

    name: str
    path: Path
    policy: str
    queues: Path | None
    options: SimOptions
    spot: bool
    least_attained_service: LeastAttainedService | None


@dataclass(frozen=True)
class PlannedRun:
    """One run of a comparison with everything it reads: a task of `sim.workers` (it pickles, so it
    may run in another process)."""

    trace: Trace
    pools: list[GPUPool]
    queues: list[Queue]
    begin: float
    days: float | None
    options: SimOptions
    state_dir: Path | None

    def __call__(self, progress: Callable[[str], None]) -> SimResult:
        return simulate(
            self.trace,
            self.pools,
            self.queues,
            begin=self.begin,
            days=self.days,
            options=self.options,
            state_dir=self.state_dir,
            progress=progress,
        )


def load_config(path: str | Path, *, seed: int = 0) -> RunSpec:
    """A configuration file as a run; every problem is a ValidationError naming the file and field."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read it: {exc.strerror}", obj=where) from exc
    data = load_yaml(text, where)
    if not isinstance(data, dict):
        raise ValidationError(
            "must be a mapping of options (policy, queues, checkpointInterval, ...)", obj=where
        )
    try:
        config = RunConfig.model_validate(data)
    except pydantic.ValidationError as exc:
        raise translate_error(exc, obj=where) from exc

    def parsed(field: str, parse: Callable[[], _T]) -> _T:
        try:
            return parse()
        except GpuFleetError as exc:
            raise ValidationError(exc.detail, obj=where, field=field) from exc

    if config.policy != "gpufleet" and config.queues is not None:
        raise ValidationError(f"the {config.policy} baseline has its own queue", obj=where, field="queues")
    if config.policy != "las" and config.least_attained_service is not None:
        raise ValidationError("applies only with policy: las", obj=where, field="leastAttainedService")
    if config.placement is not None and config.placement not in POLICY_NAMES:
        raise ValidationError(
            f"unknown placement policy {config.placement!r}; known: {', '.join(POLICY_NAMES)}",
            obj=where,
            field="placement",
        )
    slowdown = parsed("gangSlowdown", lambda: check_slowdown(config.gang_slowdown or {}, "gangSlowdown"))
    interval = config.checkpoint_interval
    failures = config.failures
    gpu_mtbf, node_mtbf = parsed("failures", lambda: parse_failures(failures)) if failures else (None, None)
    spot = config.spot
    restart = config.restart_time
    options = SimOptions(
        policy=config.policy,
        checkpoint_interval=(
            parsed("checkpointInterval", lambda: parse_checkpoint_interval(interval, "checkpointInterval"))
            if interval
            else None
        ),
        gpu_mtbf_seconds=gpu_mtbf,
        node_mtbf_seconds=node_mtbf,
        restart_seconds=(
            parsed("restartTime", lambda: parse_duration(restart, "restartTime")) if restart else 0.0
        ),
        spot_interruptions_per_day=parsed("spot", lambda: parse_spot(spot)) if spot else 0.0,
        seed=seed,
        scheduler=SchedulerConfig(placement=config.placement, seed=seed) if config.placement else None,
        gang_slowdown=slowdown,
    )
    queues = None
    if config.queues is not None:
        queues = (path.parent / config.queues).resolve()
        if not queues.is_file():
            raise ValidationError(f"no such file: {queues}", obj=where, field="queues")
    name = config.name or path.name.removesuffix(".yaml").removesuffix(".yml")
    if not RUN_NAME.fullmatch(name):
        raise ValidationError(
            f"run name {name!r} names the run's folder of --report and --state-dir and its row of the "
            "table: 1-40 letters, digits, spaces and . _ + = , ( ) -, from a letter or digit to a letter, "
            "digit or )" + ("" if config.name else "; give the file a `name:`"),
            obj=where,
            field="name",
        )
    return RunSpec(
        name=name,
        path=path,
        policy=config.policy,
        queues=queues,
        options=options,
        spot=spot is not None,
        least_attained_service=config.least_attained_service,
    )


def load_configs(paths: Sequence[str | Path], *, seed: int = 0) -> list[RunSpec]:
    """Every file checked before any run; the runs' names must differ (they name the report folders)."""
    specs = [load_config(p, seed=seed) for p in paths]
    seen: dict[str, tuple[str, Path]] = {}
    for spec in specs:
        # Names differing in case alone would share a folder where file names ignore case.
        other = seen.get(spec.name.casefold())
        if other is not None:
            raise ValidationError(
                f"run name {spec.name!r} is also {other[1]}'s"
                + ("" if other[0] == spec.name else f" ({other[0]!r}, in other case)")
                + "; give each a distinct name",
                obj=str(spec.path),
                field="name",
            )
        seen[spec.name.casefold()] = (spec.name, spec.path)
    return specs


def queues_of(spec: RunSpec, pools: Sequence[GPUPool], window: Trace) -> list[Queue]:
    if spec.policy == "las" and spec.least_attained_service is not None:
        return jobfleet.las_queues(pools, spec.least_attained_service)
    try:
        return jobfleet.queues_for(spec.policy, pools, window, spec.queues)
    except ValidationError as exc:
        raise ValidationError(exc.detail, obj=exc.obj or str(spec.path), field="queues") from exc


def fleet_cost(result: SimResult) -> float:
    """The fleet's cost from the window's start to the last completion (what the runs all paid for)."""
    return result.capacity * (result.end - result.begin) / 3600 * price_per_gpu_hour(result)


def table(runs: Sequence[tuple[RunSpec, SimResult]]) -> str:
    """The side-by-side table of the runs (markdown)."""

    def h(seconds: float) -> str:
        return hours(seconds, unit="")

    lines = [
        "| run | policy | jobs | JCT mean / p50 / p99 (h) | queueing delay mean / p99 (h) | utilisation | "
        "goodput | restarts | GPU-h lost | idle GPU-h (cost) | fleet cost to the last completion |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for spec, result in runs:
        s: Summary = summarise(result)
        lines.append(
            f"| {spec.name} | {spec.policy} | {s.finished}/{s.jobs} | {h(s.jct_mean)} / {h(s.jct_p50)} / "
            f"{h(s.jct_p99)} | {h(s.wait_mean)} / {h(s.wait_p99)} | {s.utilisation:.1%} | {s.goodput:.1%} | "
            f"{s.restarts} | {s.lost_gpu_hours:,.1f} | {s.idle_gpu_hours:,.1f} (${s.idle_cost:,.0f}) | "
            f"${fleet_cost(result):,.0f} |"
        )
    return "\n".join(lines)


def write_comparison(
    runs: Sequence[tuple[RunSpec, SimResult]], folder: str | Path, *, title: str, command: str
) -> list[Path]:
    """report.md with the side-by-side table and the runs' JCT CDFs in one plot, and each run's own
    report in a folder of its name; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpufleet.sim.jobreport import write_report

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for spec, result in runs:
        written += write_report(result, out / spec.name, title=f"{title}: {spec.name}", command=command)
    fig, ax = plt.subplots(figsize=(7, 4))
    for spec, result in runs:
        values = sorted(jcts(result) / 3600)
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=spec.name)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log)")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=100)
    plt.close(fig)
    configs = "\n".join(f"- [{spec.name}]({spec.name}/report.md): `{spec.path}`" for spec, _ in runs)
    report = out / "report.md"
    report.write_text(
        f"# {title}\n\nCommand: `{command}`\n\nThe same trace window, fleet and seed for every run; "
        "fleet figures over the submission window, JCT and delays over every job.\n\n"
        f"{table(runs)}\n\n![JCT CDF](jct_cdf.png)\n\nRuns:\n\n{configs}\n",
        encoding="utf-8",
    )
    return [report, out / "jct_cdf.png", *written]
