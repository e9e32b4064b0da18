"""User data prints as it is: no rich markup or emoji codes are read into names, paths or bus ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_an_error_naming_a_path_with_brackets_prints_the_path_verbatim(tmp_path: Path) -> None:
    missing = tmp_path / "[bold]jobs:ab:.yaml"
    done = _gpufleet("scenario", "run", str(missing))
    assert done.returncode != 0
    assert "[bold]jobs:ab:.yaml" in done.stderr


def test_agent_inspect_prints_pci_bus_ids_verbatim() -> None:
    done = _gpufleet("agent", "inspect", "--profile", "hgx-h100")
    assert done.returncode == 0, done.stderr
    assert "00000000:AB:00.0" in done.stdout
