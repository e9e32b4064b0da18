"""Job-level traces: the Philly trace as the Pollux artifact published it, and the fleet it runs on.

A trace file is a CSV with the columns `timestamp,duration,num_gpus,cluster` (`gpu_time` and any
other column are ignored):

- `timestamp`: the job's submission, from 1970 to before 9000, rows in any order: `YYYY-MM-DD HH:MM:SS`
  (UTC; Philly's form), another ISO 8601 date and time (`2017-10-09T07:01:55Z`, with an offset or
  without, which is UTC), or a number of seconds since the Unix epoch (a trace that counts seconds from
  its own start reads the same: only the gaps between submissions matter);
- `duration`: seconds the job computes with all its GPUs (> 0, at most 100 years);
- `num_gpus`: whole GPUs it asks for (>= 1, at most 8,388,608);
- `cluster`: the virtual cluster (tenant) it was submitted by; each becomes a queue `vc-<cluster>`, so
  it is letters, digits and `-` (at most 60, a letter or digit at each end), and two clusters may not
  differ only in case;
- `mig` (optional): a MIG profile (`1g.10gb`): the job is one pod holding one instance of it instead of
  whole GPUs (`num_gpus` must then be 1); empty for whole GPUs. It runs on MIG pools only.
- `checkpoint_interval` (optional): seconds between the job's checkpoints (at least 1), overriding the
  run's `--checkpoint-interval` for this job; `0` for a job that never checkpoints; empty for the run's.

Every row that cannot be read (a value beyond the header's columns included) fails with a DataError
naming the file, the line and the column.
Jobs come back sorted by submission (then by line), with `submit` in seconds from the first one.

`--trace philly` is looked for as `philly-derived-pollux/philly.csv` in the data directories that
`gpufleet bench fgd` reads (`--data-dir`, else `$GPUFLEET_DATA`, else `../shared/data` beside the
repository, then the user's cache).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpufleet.api.errors import DataError
from gpufleet.api.training import MIN_CHECKPOINT_SECONDS
from gpufleet.sharing.mig import is_known_profile
from gpufleet.sim.csvrows import csv_rows
from gpufleet.sim.datasets import data_dirs

PHILLY_FILE = Path("philly-derived-pollux") / "philly.csv"
COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# The trace's own form of TIME_FORMAT (zero-padded): read by hand, a tenth of strptime's cost, which was
# most of loading the trace's 82,000 rows; anything else strptime still reads or refuses.
_PADDED_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})")
TRACE_NAMES = {"philly": PHILLY_FILE}
_CLUSTER = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,58}[A-Za-z0-9])?")
"""A virtual cluster's id: its queue is `vc-<id in lower case>`, a DNS label of at most 63 characters."""
_LATEST = datetime(9000, 1, 1, tzinfo=UTC).timestamp()
"""Submissions from then on are refused: a job's end must stay a time Python can hold (year 9999)."""
DAY = 86400.0
MAX_DURATION_DAYS = 36_500
"""Longer jobs are refused: a century of computing is no job, and a duration near the largest float
made the queues' demand (GPUs times seconds) infinite."""
MAX_JOB_GPUS = 1 << 23
"""More GPUs than any simulated fleet holds (65,536 nodes of at most 72): a job asking more is refused
rather than carried as a number too large for the demand's floats."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: where it came from, when it arrives, what it asks for and for how long."""

    line: int
    """Its line in the trace file (also its identity: `j<line>`)."""
    submit: float
    """Seconds after the trace's first submission."""
    duration: float
    gpus: int
    cluster: str
    mig: str | None = None
    """A MIG profile: the job is one pod holding one instance of it (None: `gpus` whole GPUs)."""
    checkpoint_interval: float | None = None
    """Seconds between its checkpoints (0: never); None: the run's interval."""

    @property
    def name(self) -> str:
        return f"j{self.line}"


@dataclass(frozen=True, slots=True)
class Trace:
    path: Path
    start: float
    """The first submission, seconds since the Unix epoch."""
    jobs: tuple[TraceJob, ...]

    @property
    def clusters(self) -> list[str]:
        return sorted({j.cluster for j in self.jobs})

    def busy_start(self) -> float:
        """Seconds from the first submission to the start (UTC midnight) of the trace's first busy day:
        the first day with at least a quarter of the median submissions of the days that have any.
        (Philly's first 20 days hold a few dozen jobs; its steady load starts on 2017-09-24.)"""
        first_midnight = self.start - self.start % DAY
        counts: dict[int, int] = {}
        for job in self.jobs:
            day = int((self.start + job.submit - first_midnight) // DAY)
            counts[day] = counts.get(day, 0) + 1
        busy = sorted(counts.values())[len(counts) // 2] / 4
        day = min(d for d, n in counts.items() if n >= busy)
        return max(0.0, first_midnight + day * DAY - self.start)

    def window(self, start: float, days: float | None) -> Trace:
        """The jobs submitted from `start` seconds after the first submission, for `days` days (to the
        end for None); their `submit` stays relative to the trace's first submission."""
        end = math.inf if days is None else start + days * DAY
        return Trace(self.path, self.start, tuple(j for j in self.jobs if start <= j.submit < end))

    def nearest_submissions(self, start: float, days: float | None) -> str:
        """Where this trace's submissions lie around the window `window(start, days)` found empty, in
        the days after the first submission that `--start-day` counts (for the refusal's message)."""
        end = math.inf if days is None else start + days * DAY
        later = [j.submit for j in self.jobs if j.submit >= end]
        where = (
            f"days {start / DAY:.3f} to {end / DAY:.3f}"
            if days is not None
            else f"from day {start / DAY:.3f}"
        )
        if later:
            return f"{where}; the next one is submitted at day {min(later) / DAY:.3f}"
        last = max((j.submit for j in self.jobs), default=0.0)
        return f"{where}; its last one is submitted at day {last / DAY:.3f}"

    def gpu_demand(self) -> dict[str, float]:
        """GPU-seconds asked for, per cluster."""
        out: dict[str, float] = {}
        for job in self.jobs:
            out[job.cluster] = out.get(job.cluster, 0.0) + job.gpus * job.duration
        return out


def resolve(trace: str, data: str | Path | None = None) -> Path:
    """A trace by name (`philly`) or by the path of a CSV."""
    if trace not in TRACE_NAMES or Path(trace).is_file():
        if not Path(trace).is_file():
            known = ", ".join(sorted(TRACE_NAMES))
            raise DataError(f"no such trace file (known trace names: {known})", path=trace)
        return Path(trace)
    dirs = data_dirs(data)
    for folder in dirs:
        candidate = folder / TRACE_NAMES[trace]
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(d / TRACE_NAMES[trace]) for d in dirs)
    raise DataError(
        f"trace file not found (looked in {looked}); set --data-dir or $GPUFLEET_DATA",
        path=f"trace {trace!r}",
    )


def load(path: str | Path) -> Trace:
    """Reads a job trace (see the module docstring); a bad row is a DataError with file:line and column."""
    path = Path(path)
    where = str(path)
    raw = [_row(values, where, line) for line, values in csv_rows(path, COLUMNS)]
    if not raw:
        raise DataError("the trace has no jobs", path=where)
    _check_queues_distinct(raw, where)
    start = min(r[1] for r in raw)
    raw.sort(key=lambda r: (r[1], r[0]))
    jobs = tuple(
        TraceJob(line, submit - start, duration, gpus, cluster, mig, checkpoint)
        for line, submit, duration, gpus, cluster, mig, checkpoint in raw
    )
    return Trace(path, start, jobs)


def _timestamp(text: str) -> float:
    """Seconds since the epoch of a submission time (the module docstring's forms); ValueError if it is
    none of them."""
    match = _PADDED_TIME.fullmatch(text)
    if match is not None:
        year, month, day, hour, minute, second = map(int, match.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    try:
        return float(text)
    except ValueError:
        pass
    # A date alone is refused: a submission needs its time of day.
    if len(text) > len("YYYY-MM-DD") and text[len("YYYY-MM-DD")] in "T ":
        with contextlib.suppress(ValueError):
            when = datetime.fromisoformat(text)
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC).timestamp()


_Row = tuple[int, float, float, int, str, str | None, float | None]


def _row(values: Mapping[str, str], where: str, line: int) -> _Row:
    text = values["timestamp"]
    try:
        submit = _timestamp(text)
    except ValueError:
        raise DataError(
            f"not a time (YYYY-MM-DD HH:MM:SS, another ISO 8601 date and time, or seconds since the "
            f"Unix epoch): {text!r}",
            path=where,
            line=line,
            field="timestamp",
        ) from None
    if not 0 <= submit < _LATEST:
        raise DataError(
            f"must be from 1970-01-01 (the Unix epoch) to before 9000-01-01, got {text!r}",
            path=where,
            line=line,
            field="timestamp",
        )
    text = values["duration"]
    try:
        duration = float(text)
    except ValueError:
        raise DataError(f"not a number: {text!r}", path=where, line=line, field="duration") from None
    if not math.isfinite(duration) or duration <= 0:
        raise DataError(
            f"must be a positive number of seconds, got {text!r}", path=where, line=line, field="duration"
        )
    if duration > MAX_DURATION_DAYS * DAY:
        raise DataError(
            f"must be at most {MAX_DURATION_DAYS:,} days ({MAX_DURATION_DAYS * DAY:,.0f} s), got {text!r}",
            path=where,
            line=line,
            field="duration",
        )
    text = values["num_gpus"]
    try:
        gpus = int(text)
    except ValueError:
        raise DataError(
            f"must be a whole number of GPUs, got {text!r}", path=where, line=line, field="num_gpus"
        ) from None
    if not 1 <= gpus <= MAX_JOB_GPUS:
        raise DataError(
            f"must be at least 1 and at most {MAX_JOB_GPUS:,}, got {text!r}",
            path=where,
            line=line,
            field="num_gpus",
        )
    cluster = values["cluster"]
    if not cluster:
        raise DataError("empty virtual cluster", path=where, line=line, field="cluster")
    if not _CLUSTER.fullmatch(cluster):
        raise DataError(
            f"{cluster!r} cannot name a queue: letters, digits and '-', starting and ending with a "
            "letter or digit, at most 60 characters",
            path=where,
            line=line,
            field="cluster",
        )
    mig = values.get("mig") or None
    if mig is not None:
        if not is_known_profile(mig):
            raise DataError(f"not a MIG profile: {mig!r}", path=where, line=line, field="mig")
        if gpus != 1:
            message = f"a MIG job is one instance: num_gpus must be 1, got {gpus}"
            raise DataError(message, path=where, line=line, field="mig")
    return line, submit, duration, gpus, cluster, mig, _checkpoint_interval(values, where, line)


def _check_queues_distinct(raw: list[_Row], where: str) -> None:
    """Refuses two virtual clusters that differ only in case: they would share one queue."""
    seen: dict[str, str] = {}
    for line, _, _, _, cluster, _, _ in raw:
        first = seen.setdefault(cluster.lower(), cluster)
        if first != cluster:
            raise DataError(
                f"virtual clusters {first!r} and {cluster!r} differ only in case, and would share the "
                f"queue vc-{cluster.lower()}",
                path=where,
                line=line,
                field="cluster",
            )


def _checkpoint_interval(values: Mapping[str, str], where: str, line: int) -> float | None:
    text = values.get("checkpoint_interval") or ""
    if not text.strip():
        return None
    try:
        interval = float(text)
    except ValueError:
        interval = math.nan
    if not math.isfinite(interval) or interval < 0 or 0 < interval < MIN_CHECKPOINT_SECONDS:
        raise DataError(
            f"must be seconds between checkpoints, at least {MIN_CHECKPOINT_SECONDS:g} (0: never), "
            f"got {text!r}",
            path=where,
            line=line,
            field="checkpoint_interval",
        )
    return interval
