"""`gpufleet logs` and `gpufleet suspend|resume` against a cluster (`--kubeconfig`), here the in-memory
API server served over HTTP to the official client, as `pytest -m k8s` uses it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api.labels import JOB_LABEL
from gpufleet.cli import main as cli_main
from gpufleet.kube.training import ATTEMPT_LABEL

from .fake_http import serve, write_kubeconfig
from .fakeapi import FakeApiServer
from .test_operator import JOBS, make_job

PODS = "/api/v1/namespaces/team-a/pods"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeApiServer, str]]:
    api = FakeApiServer()
    server = serve(api)
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, server.server_address[1])
    try:
        yield api, str(config)
    finally:
        server.shutdown()


def gpufleet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["gpufleet", *args])
    try:
        cli_main.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def worker(name: str, attempt: int) -> dict:
    labels = {JOB_LABEL: "llm", ATTEMPT_LABEL: str(attempt)}
    return {"metadata": {"name": name, "namespace": "team-a", "labels": labels}, "spec": {"containers": []}}


def test_logs_read_the_current_attempts_pods_through_the_api_server(
    cluster: tuple[FakeApiServer, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api, config = cluster
    for name, attempt in (("llm-0-0", 0), ("llm-1-0", 1), ("llm-1-1", 1)):
        api.put(PODS, worker(name, attempt))
    api.pod_logs[("team-a", "llm-1-0")] = ["rank 0 up", "loss 2.1"]
    api.pod_logs[("team-a", "llm-1-1")] = ["rank 1 up"]
    code, out = gpufleet(monkeypatch, capsys, "logs", "tj/llm", "-n", "team-a", "--kubeconfig", config)
    assert code == 0 and out.splitlines() == [
        "[llm-1-0] rank 0 up",
        "[llm-1-0] loss 2.1",
        "[llm-1-1] rank 1 up",
    ]
    code, out = gpufleet(monkeypatch, capsys, "logs", "llm-1-1", "-n", "team-a", "--kubeconfig", config)
    assert code == 0 and out == "rank 1 up\n"
    code, out = gpufleet(monkeypatch, capsys, "logs", "pod/gone", "-n", "team-a", "--kubeconfig", config)
    assert code == 1 and "pod team-a/gone" in out


def test_suspend_and_resume_patch_the_jobs_spec(
    cluster: tuple[FakeApiServer, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api, config = cluster
    make_job(api)
    code, out = gpufleet(monkeypatch, capsys, "suspend", "tj", "llm", "-n", "team-a", "--kubeconfig", config)
    assert code == 0 and "trainingjob/team-a/llm suspended" in out
    assert api.objects[JOBS][("team-a", "llm")]["spec"]["suspend"] is True
    code, out = gpufleet(monkeypatch, capsys, "resume", "tj", "llm", "-n", "team-a", "--kubeconfig", config)
    assert code == 0 and api.objects[JOBS][("team-a", "llm")]["spec"]["suspend"] is False
    code, out = gpufleet(monkeypatch, capsys, "resume", "tj", "nope", "-n", "team-a", "--kubeconfig", config)
    assert code == 1 and "TrainingJob team-a/nope" in out
