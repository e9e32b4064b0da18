"""The long-running commands' --log-format and --metrics-bind-address: bad values are one line and
exit 2, before anything is started."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from .conftest import Result


@pytest.fixture(autouse=True)
def _keep_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


@pytest.mark.parametrize("command", [["kube", "scheduler"], ["kube", "operator"], ["up"]])
def test_an_unknown_log_format_is_refused(cli: Callable[..., Result], command: list[str]) -> None:
    result = cli(*command, "--log-format", "xml")
    assert result.code == 2
    assert "--log-format" in result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize("command", [["kube", "scheduler"], ["kube", "operator"]])
def test_a_bad_metrics_address_is_refused(cli: Callable[..., Result], command: list[str]) -> None:
    result = cli(*command, "--metrics-bind-address", "localhost:http")
    assert result.code == 2
    assert "--metrics-bind-address" in result.err
    assert "Traceback" not in result.err
