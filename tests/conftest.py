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


class _ContainedFailures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(autouse=True)
def _no_failure_contained_unseen(request: pytest.FixtureRequest) -> Iterator[None]:
    """The control plane logs an error no user caused and goes on with the other objects (as it must
    when running: `controllers.failures`); in a test that is a bug found, so the test fails, unless
    it is marked `contained_failures` (it makes one happen on purpose)."""
    handler = _ContainedFailures()
    logger = logging.getLogger("gpufleet.controllers.failures")
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    if handler.messages and request.node.get_closest_marker("contained_failures") is None:
        pytest.fail(f"a failure was contained: {handler.messages[0]} (its traceback is in the captured log)")
