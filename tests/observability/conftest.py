from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A scratch directory with a short path: the twin's state directory holds unix sockets of its own."""
    path = Path(subprocess.check_output(["mktemp", "-d", "/tmp/gf-alerts-XXXX"], text=True).strip())
    yield path
    shutil.rmtree(path, ignore_errors=True)
