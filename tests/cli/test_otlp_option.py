"""`--otlp-endpoint` of the long-running commands: a value that is not an http(s) URL is one line
naming the option and exit 2, before anything is started."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from gpufleet.observability import tracing

from .conftest import Result


@pytest.fixture(autouse=True)
def _keep_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


@pytest.mark.parametrize("command", [["kube", "scheduler"], ["kube", "operator"], ["up"]])
def test_an_endpoint_that_is_not_a_url_is_refused(cli: Callable[..., Result], command: list[str]) -> None:
    result = cli(*command, "--otlp-endpoint", "collector:4318")
    assert result.code == 2
    assert "--otlp-endpoint" in result.err and "collector:4318" in result.err
    assert "Traceback" not in result.err
    assert not tracing.enabled()
