"""The state directory and everything in it are private to the owner, older open ones corrected."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.store import SqliteStore
from gpufleet.store.permissions import make_private


@pytest.fixture(autouse=True)
def keep_umask() -> Iterator[None]:
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_open_directory_and_its_files_are_closed_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    for name in ("gpufleet.db", "gpufleet.db-wal", "admin-token"):
        (state / name).write_text("x")
        os.chmod(state / name, 0o644)
    os.chmod(state / "admin-token", 0o600)
    with caplog.at_level(logging.WARNING):
        corrected = make_private(state)
    assert sorted(p.name for p in corrected) == ["gpufleet.db", "gpufleet.db-wal", "state"]
    assert mode(state) == 0o700
    assert {p.name: mode(p) for p in state.iterdir()} == dict.fromkeys(
        ("gpufleet.db", "gpufleet.db-wal", "admin-token"), 0o600
    )
    assert len([r for r in caplog.records if "open to other users" in r.message]) == 3
    assert make_private(state) == []  # nothing left to correct


def test_the_files_the_store_makes_afterwards_are_private(tmp_path: Path) -> None:
    state = tmp_path / "fresh"
    make_private(state)
    with SqliteStore.open(state) as store:
        store.list("Queue")
        made = {p.name: mode(p) for p in state.iterdir()}
    assert made and all(m == 0o600 for m in made.values()), made
    assert mode(state) == 0o700
