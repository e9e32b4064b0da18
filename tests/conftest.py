"""Settings for the whole test suite."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

# The in-memory store checks that nobody changes a shared write result or event object in place
# (store/memory.py, `check_shared`): every test that reads its events is such a check.
os.environ.setdefault("GPUFLEET_STORE_CHECKS", "1")


@pytest.fixture(autouse=True)
def _no_log_stream_left_closed() -> Iterator[None]:
    """A command run under typer's CliRunner points the root logger at the runner's stderr, which is
    closed when the command returns; later tests' log lines would hit the closed stream. Such handlers
    go after each test, and the root level comes back to what the test started with."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            root.removeHandler(handler)
    root.setLevel(level)
