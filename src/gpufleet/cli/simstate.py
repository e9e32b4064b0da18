"""`gpufleet simulate --state-dir`: where a simulated world is kept, and the `--json` summary's fields.

A simulation keeps its world in a SQLite store only when asked (it runs in memory otherwise); the
directory is then an ordinary state directory that `gpufleet up --state DIR --no-runtime` serves, so
`gpufleet get ... --state DIR` reads it as any other. A directory that already holds a state is refused:
the simulated objects would mix with another world's under the same names and resourceVersions.
Folders a run writes to (`--state-dir`, `--report`) are created and written to before it starts: a
refusal after the run would throw hours of simulation away.
"""

from __future__ import annotations

import contextlib
import math
import shlex
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpufleet.api.errors import ValidationError
from gpufleet.sim.jobreport import Summary
from gpufleet.sim.jobsim import SimResult
from gpufleet.store.sqlite import FILE_NAME

OPTION = "--state-dir"


def check_fresh(directory: Path) -> None:
    """Refuses a directory that cannot hold a new simulated world (before any run starts)."""
    _refuse_taken(directory)
    check_writable(directory, OPTION)


def _refuse_taken(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise ValidationError(f"{directory} is a file, not a directory", obj=OPTION)
    if (directory / FILE_NAME).exists():
        raise ValidationError(
            f"{directory} already holds a gpufleet state ({FILE_NAME}); give a new or empty directory "
            "rather than mixing two worlds",
            obj=OPTION,
        )


def check_writable(folder: Path, option: str) -> None:
    """Creates `folder` and writes a file in it (then removes it), or refuses `option`."""
    with writing(folder, option):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass


@contextlib.contextmanager
def writing(folder: Path, option: str) -> Iterator[None]:
    """An OSError inside as a ValidationError naming `option` and the folder."""
    try:
        yield
    except OSError as exc:
        raise ValidationError(f"cannot write in {folder}: {exc.strerror or exc}", obj=option) from None


def run_dirs(directory: Path, names: Sequence[str]) -> dict[str, Path]:
    """With `--compare`: each run's world in DIR/<run name>, every one checked (and only then any
    created) before the first run."""
    _refuse_taken(directory)
    dirs: dict[str, Path] = {}
    for name in names:
        # The run's name becomes one directory below DIR: never a path that leaves it.
        if name in (".", "..") or "/" in name or "\\" in name:
            raise ValidationError(f"run name {name!r} cannot name a directory under {directory}", obj=OPTION)
        dirs[name] = directory / name
        _refuse_taken(dirs[name])
    for path in dirs.values():
        check_writable(path, OPTION)
    return dirs


def summary_json(summary: Summary, result: SimResult) -> dict[str, Any]:
    """The `--json` figures, with the Events dropped unkept counted by reason (empty when kept); a
    figure there is none of (the JCT when no job finished) is null, as JSON has no NaN."""
    figures = {k: getattr(summary, k) for k in summary.__slots__}
    return {
        **{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in figures.items()},
        "events": dict(result.events),
    }


def hint(directory: Path) -> str:
    """How to look at a kept world: the embedded API over its store, without the twin or controllers
    (which would carry on from where the simulation stopped, on the wall clock)."""
    quoted = shlex.quote(str(directory))
    return (
        f"state kept in {directory}: serve it with `gpufleet up --state {quoted} --no-runtime --port 0`, "
        f"then e.g. `gpufleet get trainingjobs -A --state {quoted}`"
    )
