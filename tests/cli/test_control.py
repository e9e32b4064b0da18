"""The control commands end to end: a `gpufleet up` subprocess, and the CLI talking to it over HTTP.

The tests share one API-only control plane (starting one costs more than most tests) and each finds
it as the fleet file left it: `api_only` removes and restores what earlier tests changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpufleet.api.documents import load_objects
from gpufleet.cli.client import Client

from .conftest import Plane, Result, start_plane, stop_plane

HERE = Path(__file__).parent
FLEET = str(HERE / "fleet.yaml")
JOBS = str(HERE / "jobs.yaml")


@pytest.fixture(scope="module")
def shared_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    plane = start_plane(tmp_path_factory.mktemp("control") / "state", "--no-runtime", "--fleet", FLEET)
    yield plane
    stop_plane(plane)


@pytest.fixture
def api_only(shared_plane: Plane) -> Iterator[Plane]:
    """The shared control plane holding exactly the fleet file's objects, whatever earlier tests did."""
    assert shared_plane.process.poll() is None, f"the control plane died:\n{shared_plane.log.read_text()}"
    restore_fleet(shared_plane)
    yield shared_plane


@pytest.fixture
def state(api_only: Plane) -> Path:
    return api_only.state


def restore_fleet(plane: Plane) -> None:
    """Deletes every object the fleet file does not hold and applies the file again."""
    fleet = load_objects(Path(FLEET))
    keep = {(obj.kind, obj.namespace, obj.name) for obj in fleet}
    client = Client(plane.url, (plane.state / "admin-token").read_text().strip())
    try:
        for rtype in client.resource_types():
            for item in client.list_objects(rtype, None):
                meta = item["metadata"]
                if (rtype.kind, meta.get("namespace"), meta["name"]) not in keep:
                    client.delete(rtype, meta["name"], meta.get("namespace"))
        client.apply([obj.to_dict() for obj in fleet])
    finally:
        client.close()


def test_apply_get_describe_delete(api_only: Plane, cli: Callable[..., Result]) -> None:
    applied = cli("apply", "-f", JOBS)
    assert applied.code == 0, applied.err
    assert "trainingjob/team-a/train created" in applied.out
    assert cli("apply", "-f", JOBS).out.count("unchanged") == 2

    table = cli("get", "tj", "-A")
    assert table.code == 0 and "train" in table.out and "other" in table.out and "NAMESPACE" in table.out
    assert "other" not in cli("get", "trainingjobs", "-n", "team-a").out
    one = cli("get", "trainingjob", "train", "-n", "team-a", "-o", "json").json()
    assert one["spec"]["checkpoint"]["intervalSeconds"] == 120
    listed = cli("get", "queues", "-o", "yaml").out
    assert "name: team-a" in listed and "name: team-b" in listed
    assert "h100" in cli("get", "pools").out
    for short in ("isvc", "gisvc"):  # KServe's short name and gpufleet's own
        assert cli("get", short, "-A").code == 0

    described = cli("describe", "tj", "train", "-n", "team-a")
    assert described.code == 0
    assert "Name:" in described.out and "team-a" in described.out and "Conditions:" in described.out

    deleted = cli("delete", "tj", "other", "-n", "team-b")
    assert deleted.code == 0 and "deleted" in deleted.out
    assert cli("get", "tj", "other", "-n", "team-b").code != 0
    assert cli("delete", "-f", JOBS, "--ignore-not-found").code == 0
    assert "train" not in cli("get", "tj", "-A").out


def test_apply_from_stdin(api_only: Plane, cli: Callable[..., Result]) -> None:
    text = "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: from-stdin}\n"
    assert cli("apply", "-f", "-", stdin=text).code == 0
    assert "from-stdin" in cli("get", "gq").out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("get", "nonsense"), "unknown kind"),
        (("get", "tj", "missing", "-n", "team-a"), "TrainingJob team-a/missing: not found"),
        (("get", "tj", "-o", "toml"), "--output"),
        (("delete", "queue", "missing"), "not found"),
        (("apply", "-f", "/no/such/file.yaml"), "no such file"),
        (("fault", "gpu-failure", "n1", "--gpu", "0"), "no digital twin"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    api_only: Plane, cli: Callable[..., Result], args: tuple[str, ...], words: str
) -> None:
    result = cli(*args)
    assert result.code != 0
    assert result.err.count("\n") == 1 and result.err.startswith("error:"), result.err
    assert words in result.err


def test_invalid_manifest_names_the_field_and_applies_nothing(
    api_only: Plane, cli: Callable[..., Result], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(JOBS).read_text().replace("gpus: 4", "gpus: -4"))
    result = cli("apply", "-f", str(bad))
    assert result.code != 0 and "spec.worker.gpus" in result.err and "traceback" not in result.err.lower()
    assert "No trainingjobs" in cli("get", "tj", "-A").err


def test_the_real_command_prints_errors_on_one_line(api_only: Plane, tmp_path: Path) -> None:
    env = {**os.environ, "GPUFLEET_STATE": str(api_only.state)}
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "get", "tj", "nope", "-n", "team-a"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1  # kubectl's code for a failed operation; 2 is for usage errors
    assert done.stderr.strip().splitlines() == ["error: TrainingJob team-a/nope: not found"]
    env["GPUFLEET_SERVER"] = "http://127.0.0.1:9"  # nothing listens there
    refused = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "get", "tj"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "cannot reach the gpufleet server" in refused.stderr and "gpufleet up" in refused.stderr


def test_a_queue_token_sees_only_its_queue(api_only: Plane, cli: Callable[..., Result]) -> None:
    assert cli("apply", "-f", JOBS).code == 0
    token = cli("token", "create", "--queue", "team-a").out.strip()
    assert token.startswith("gft_")
    mine = cli("get", "tj", "-A", "--token", token)
    assert "train" in mine.out and "other" not in mine.out
    theirs = cli("get", "tj", "other", "-n", "team-b", "--token", token)
    assert theirs.code != 0 and "not found" in theirs.err
    assert cli("delete", "tj", "other", "-n", "team-b", "--token", token).code != 0
    assert cli("get", "pools", "--token", token).code != 0
    assert "other" in cli("get", "tj", "-A").out  # still there for the admin


def test_a_queue_token_describes_its_jobs_with_their_events(
    api_only: Plane, cli: Callable[..., Result], tmp_path: Path
) -> None:
    events = tmp_path / "events.yaml"
    events.write_text(
        "\n---\n".join(
            "apiVersion: gpufleet.io/v1alpha1\nkind: Event\n"
            f"metadata: {{name: {name}, namespace: {namespace}}}\n"
            f"spec: {{involvedKind: TrainingJob, involvedName: {job}, reason: {reason},"
            " message: tested, time: '2026-01-01T00:00:00Z'}"
            for name, namespace, job, reason in (
                ("ev-train", "team-a", "train", "TrainEvent"),
                ("ev-other", "team-b", "other", "OtherEvent"),
            )
        )
    )
    assert cli("apply", "-f", JOBS).code == 0 and cli("apply", "-f", str(events)).code == 0
    token = cli("token", "create", "--queue", "team-a").out.strip()
    described = cli("describe", "tj", "train", "-n", "team-a", "--token", token)
    assert described.code == 0 and "TrainEvent" in described.out
    listed = cli("get", "events", "-A", "--token", token)
    assert "ev-train" in listed.out and "ev-other" not in listed.out
    assert "OtherEvent" in cli("describe", "tj", "other", "-n", "team-b").out  # the admin sees it
    assert cli("describe", "tj", "other", "-n", "team-b", "--token", token).code != 0


def test_a_second_server_on_a_taken_port_fails_clearly(api_only: Plane, tmp_path: Path) -> None:
    port = api_only.url.rsplit(":", 1)[1]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufleet.cli.main",
            "up",
            "--no-runtime",
            "--state",
            str(tmp_path / "s2"),
            "--port",
            port,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "cannot listen" in done.stderr and "Traceback" not in done.stderr


def test_up_stops_cleanly_on_sigterm(planes: Callable[..., Plane]) -> None:
    import signal

    own = planes("--no-runtime", "--fleet", FLEET)  # not the shared one: this test stops it
    own.process.send_signal(signal.SIGTERM)
    assert own.process.wait(timeout=30) == 0
    assert not (own.state / "server.url").exists()
    assert "stopped; the state is kept" in own.log.read_text()
