"""One server per state directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.server.statelock import StateInUseError, StateLock


def test_a_second_lock_on_a_directory_in_use_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    (tmp_path / "server.url").write_text("http://127.0.0.1:9999\n")
    with StateLock(tmp_path):
        with pytest.raises(StateInUseError) as caught:
            StateLock(tmp_path).acquire()
        message = str(caught.value)
        assert str(tmp_path) in message
        assert f"pid {os.getpid()}" in message and "http://127.0.0.1:9999" in message
    # Released: the next server takes it.
    with StateLock(tmp_path):
        pass
