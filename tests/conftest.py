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


class _FailedReconciles(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(autouse=True)
def _no_reconcile_failed_unseen(request: pytest.FixtureRequest) -> Iterator[None]:
    """The controller manager logs a reconcile that raised and goes on with the other objects (as it
    must in a running control plane); in a test that is a bug found, so the test fails, unless it is
    marked `reconcile_failures` (it makes one fail on purpose)."""
    handler = _FailedReconciles()
    logger = logging.getLogger("gpufleet.controllers.manager")
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    if handler.messages and request.node.get_closest_marker("reconcile_failures") is None:
        pytest.fail(f"a reconcile failed: {handler.messages[0]} (its traceback is in the captured log)")
