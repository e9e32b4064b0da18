"""scripts/bare-apiserver.sh: a binary it cannot find is named with the variable that gives it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bare-apiserver.sh"


@pytest.mark.parametrize(
    ("given", "missing", "variable"),
    [({}, "etcd", "ETCD"), ({"ETCD": sys.executable}, "kube-apiserver", "KUBE_APISERVER")],
)
def test_a_missing_binary_names_the_variable_to_set(
    tmp_path: Path, given: dict[str, str], missing: str, variable: str
) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    # An empty PATH: neither binary is found there, and nothing is started.
    env = {"PATH": str(tmp_path), "BARE_STATE": str(tmp_path / "state"), **given}
    done = subprocess.run([bash, str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip() == f"bare-apiserver: {missing} not found: set {variable} or put it on PATH"
    assert done.stdout == ""
