"""`gpufleet kube manager` and the scheduler's federation options: what is wrong is said in one line,
before anything connects."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .conftest import Result


@pytest.mark.parametrize(
    "options", [["--cluster-name", "w1"], ["--manager-kubeconfig", "/nowhere/manager.yaml"]]
)
def test_a_federation_worker_needs_both_its_manager_and_its_cluster_name(
    cli: Callable[..., Result], options: list[str]
) -> None:
    result = cli("kube", "scheduler", *options)
    assert result.code != 0
    assert "--manager-kubeconfig and --cluster-name" in result.err
    assert "Traceback" not in result.err


def test_the_manager_names_a_missing_kubeconfig(cli: Callable[..., Result]) -> None:
    result = cli("kube", "manager", "--kubeconfig", "/nowhere/manager.yaml")
    assert result.code != 0
    assert "/nowhere/manager.yaml" in result.err and "--kubeconfig" in result.err
    assert "Traceback" not in result.err
