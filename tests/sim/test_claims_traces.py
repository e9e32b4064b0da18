"""The production-claim traces in benchmarks/claims/traces are what make_traces.py draws (fixed
seeds), and the simulator reads them: the recorded results can be repeated from the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpufleet.sim import philly

CLAIMS = Path(__file__).resolve().parents[2] / "benchmarks" / "claims"


def test_make_traces_writes_the_committed_traces(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(CLAIMS / "make_traces.py"), str(tmp_path)], check=True, capture_output=True
    )
    written = sorted(p.name for p in tmp_path.glob("*.csv"))
    assert written == sorted(p.name for p in (CLAIMS / "traces").glob("*.csv"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (CLAIMS / "traces" / name).read_bytes(), name
        assert philly.load(tmp_path / name).jobs


def test_the_split_trace_is_the_same_work_without_gangs() -> None:
    gang = philly.load(CLAIMS / "traces" / "gang.csv").jobs
    split = philly.load(CLAIMS / "traces" / "gang-split.csv").jobs
    assert sum(j.gpus * j.duration for j in gang) == sum(j.gpus * j.duration for j in split)
    assert max(j.gpus for j in split) == 8 < max(j.gpus for j in gang)
