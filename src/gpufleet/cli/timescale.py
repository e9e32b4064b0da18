"""Wall time, optionally sped up, that never runs backwards across restarts of one state directory.

`gpufleet up --time-scale 60` makes a minute of the digital twin pass every second: demos show a
day of a fleet in minutes and tests see jobs checkpoint, fail and finish quickly. The store stamps
objects with the same clock, so every time a user reads is on one time line.

The clock is `origin + (real - real_origin) * scale`. Its parameters are kept in the state directory:
a restart (at any scale) continues from where the clock is now, so stored times stay in the past.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

from gpufleet.api.errors import ValidationError
from gpufleet.twin.clock import as_datetime

CLOCK_FILE = "clock.json"


class ScaledClock:
    """Real time multiplied by `scale` from an origin."""

    def __init__(self, scale: float, *, origin: float, real_origin: float) -> None:
        self.scale = scale
        self.origin = origin
        self.real_origin = real_origin

    def now(self) -> float:
        return self.origin + (time.time() - self.real_origin) * self.scale

    def datetime(self) -> datetime:
        return as_datetime(self.now())


def clock_for(state_dir: Path, scale: float) -> ScaledClock:
    """The clock of a state directory at `scale`, continuing the time line it had before."""
    if not 0 < scale <= 10_000:
        raise ValidationError(f"must be > 0 and <= 10000, got {scale}", field="--time-scale")
    real = time.time()
    path = state_dir / CLOCK_FILE
    origin = real
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        previous = ScaledClock(
            float(saved["scale"]), origin=float(saved["origin"]), real_origin=float(saved["realOrigin"])
        )
        origin = max(real, previous.now())  # never behind real time, never behind the old clock
    except (OSError, ValueError, KeyError, TypeError):
        pass  # first start, or an unreadable file: start from real time
    clock = ScaledClock(scale, origin=origin, real_origin=real)
    temporary = path.with_name(CLOCK_FILE + ".tmp")
    temporary.write_text(json.dumps({"scale": scale, "origin": origin, "realOrigin": real}), encoding="utf-8")
    os.replace(temporary, path)
    return clock
