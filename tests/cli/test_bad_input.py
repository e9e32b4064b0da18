"""Bad input gets one line naming the file, option or field, and exit 2 (or 130 for Ctrl-C); never a
traceback. Each test is one way a newcomer met a traceback, or a silent acceptance, before."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import Plane, Result, start_plane, stop_plane, wait_for

HERE = Path(__file__).parent
NOT_UTF8 = b"apiVersion: gpufleet.io/v1alpha1\nkind: \xff\xfe Queue\n"


def one_line_error(result: Result, *named: str, code: int = 2) -> str:
    """The error line of a refused command, checked to be one line naming each of `named`."""
    assert result.code == code, (result.code, result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    for name in named:
        assert name in lines[0], (name, lines[0])
    return lines[0]


@pytest.fixture
def not_utf8(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(NOT_UTF8)
    return path


# ------------------------------------------------------------------------------ files not UTF-8


@pytest.mark.parametrize(
    "command",
    [
        ["apply", "-f"],
        ["delete", "-f"],
        ["scenario", "run"],
        ["agent", "inspect", "--profile"],
        ["agent", "inspect", "--config"],
    ],
)
def test_a_file_that_is_not_utf8_is_named_with_the_byte(
    command: list[str], not_utf8: Path, cli: Callable[..., Result]
) -> None:
    line = one_line_error(cli(*command, str(not_utf8)), str(not_utf8), "not UTF-8", "0xff", "line 2")
    assert line.startswith("error: ")


def test_stdin_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*_gpufleet(), "apply", "-f", "-"],
        input=NOT_UTF8,
        capture_output=True,
        timeout=120,
        env={**os.environ, "GPUFLEET_STATE": str(tmp_path / "state")},
    )
    one_line_error(Result(done.returncode, "", done.stderr.decode()), "stdin", "not UTF-8")


# ------------------------------------------------------------------------------ scenario YAML


def test_malformed_scenario_yaml_is_one_line_as_for_apply(tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: gpufleet.io/v1alpha1\nkind: Scenario\nmetadata: {name: x\nspec: [\n")
    scenario = one_line_error(cli("scenario", "run", str(path)), str(path), "not valid YAML", "line 4")
    applied = one_line_error(cli("apply", "-f", str(path)), str(path), "not valid YAML")
    assert scenario == applied


# ------------------------------------------------------------------------------ hostile YAML

_HEAD = "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec:\n"
DEEP = _HEAD + "  x: " + "[" * 5000 + "]" * 5000 + "\n"
# Ten anchors, each a list of nine aliases of the one before: 30 lines standing for 9**10 values.
BOMB = _HEAD + "".join(
    f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "x"] * 9) + "]\n" for i in range(10)
)
NAN = _HEAD + "  x: .nan\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [(DEEP, "nested more than 64 levels"), (BOMB, "more than 200000 values"), (NAN, "finite number")],
    ids=["deep", "alias-bomb", "nan"],
)
@pytest.mark.parametrize("command", [["apply", "-f"], ["scenario", "run"], ["agent", "inspect", "--config"]])
def test_yaml_nested_too_deep_too_large_or_with_nan_is_one_line(
    text: str, says: str, command: list[str], tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Python's recursion ran out on the first, walking the second never ended, and the third reached
    the fields: each is refused on its own, as the API server refuses such a body."""
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    one_line_error(cli(*command, str(path)), str(path), says)


# ------------------------------------------------------------------------------ gpufleet up


def test_up_on_a_file_or_under_one_names_the_state_option(tmp_path: Path, cli: Callable[..., Result]) -> None:
    a_file = tmp_path / "state.txt"
    a_file.write_text("not a directory\n")
    one_line_error(
        cli("up", "--state", str(a_file), "--port", "0"), "--state", str(a_file), "not a directory"
    )
    one_line_error(cli("up", "--state", str(a_file / "sub"), "--port", "0"), "--state", "Not a directory")
    assert a_file.read_text() == "not a directory\n"


def test_up_on_a_read_only_directory_names_the_state_option(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o700)
    read_only.chmod(0o500)
    if os.geteuid() == 0:
        # root writes into any directory whatever its mode: the refusal the OS gives everyone else
        # is played here, so the message is checked all the same.
        import tempfile

        def refused(*args: object, **kwargs: object) -> object:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    try:
        one_line_error(cli("up", "--state", str(read_only), "--port", "0"), "--state", "Permission denied")
    finally:
        read_only.chmod(0o700)
    assert list(read_only.iterdir()) == []


def test_up_on_a_busy_port_fails_before_it_creates_the_state(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        state = tmp_path / "fresh-state"
        one_line_error(cli("up", "--state", str(state), "--port", str(port)), "--port", f":{port}", "in use")
    assert not state.exists(), "no state directory, no admin token for a server that never ran"


# ------------------------------------------------------------------------------ Ctrl-C


def _gpufleet() -> list[str]:
    script = Path(sys.executable).parent / "gpufleet"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gpufleet.cli.main"]


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.2, 0.4, 0.7, 1.0])
@pytest.mark.parametrize("command", [["scenario", "run"], ["up", "--no-runtime", "--port", "0"]])
def test_ctrl_c_in_the_first_second_exits_130_without_a_traceback(
    command: list[str], delay: float, tmp_path: Path
) -> None:
    """The first second of a command is mostly imports: a Ctrl-C there used to print the traceback
    of whatever module was being imported."""
    args = [*command, str(HERE.parents[1] / "scenarios")] if command[0] == "scenario" else command
    if command[0] == "up":
        args = [*args, "--state", str(tmp_path / "state")]
    process = subprocess.Popen(
        [*_gpufleet(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert "Traceback" not in err, err
    # 130 while it was starting; 0 for a command that had finished, or an `up` already serving,
    # which stops cleanly on Ctrl-C.
    assert process.returncode in (130, 0), (process.returncode, out, err)


# ------------------------------------------------------------------------------ faults


@pytest.fixture(scope="module")
def fleet_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    plane = start_plane(tmp_path_factory.mktemp("bad-input") / "state", "--fleet", str(HERE / "fleet.yaml"))
    yield plane
    stop_plane(plane)


@pytest.fixture
def state(fleet_plane: Plane) -> Path:
    return fleet_plane.state


def _a_node(cli: Callable[..., Result]) -> str:
    def listed() -> str | None:
        done = cli("get", "nodes", "-o", "json")
        items = done.json()["items"] if done.code == 0 and done.out.strip() else []
        return items[0]["metadata"]["name"] if items else None

    name: str = wait_for(listed, timeout=60, what="the pool's nodes")
    return name


def test_a_gpu_for_a_fault_of_a_whole_node_is_refused(cli: Callable[..., Result]) -> None:
    for kind in ("node-loss", "spot-interruption"):
        one_line_error(cli("fault", kind, "h100-0", "--gpu", "3"), "--gpu", kind, "whole node")


def test_a_gpu_the_node_does_not_have_names_the_nodes_gpus(cli: Callable[..., Result]) -> None:
    node = _a_node(cli)
    line = one_line_error(cli("fault", "gpu-failure", node, "--gpu", "99"), "--gpu", f"node/{node}", "0..7")
    assert "71" not in line
    missing = cli("fault", "gpu-failure", "no-such-node", "--gpu", "1")
    one_line_error(missing, "no-such-node", "not found", code=1)  # a failed operation, as kubectl's


def test_the_fault_api_says_the_same_to_any_client(fleet_plane: Plane, cli: Callable[..., Result]) -> None:
    node = _a_node(cli)
    token = (fleet_plane.state / "admin-token").read_text().strip()

    def post(body: dict[str, object]) -> httpx.Response:
        return httpx.post(
            f"{fleet_plane.url}/v1/faults", json=body, headers={"Authorization": f"Bearer {token}"}
        )

    too_high = post({"type": "GpuFailure", "node": node, "gpu": 99})
    assert too_high.status_code == 422
    assert too_high.json()["error"]["field"] == "gpu"
    assert f"node {node} has GPUs 0..7, got 99" in too_high.json()["error"]["message"]
    whole = post({"type": "NodeLoss", "node": node, "gpu": 3})
    assert whole.status_code == 422 and whole.json()["error"]["field"] == "gpu"


# ------------------------------------------------------------------------------ unknown queue


def test_an_unknown_queue_names_the_closest_and_a_few_not_thousands(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    queues = "".join(
        f"---\napiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {{name: research-{i:04d}}}\n"
        for i in range(300)
    )
    job = (
        "---\napiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\n"
        "metadata: {name: typo, namespace: team-a}\n"
        "spec: {queue: reserch-0117, replicas: 1, worker: {gpus: 1}}\n"
    )
    path = tmp_path / "queues.yaml"
    path.write_text(queues + job)
    line = one_line_error(cli("apply", "-f", str(path)), "spec.queue", "'reserch-0117'")
    assert "did you mean 'research-0117'?" in line
    assert "302 leaf queues" in line and "gpufleet get queues" in line
    assert len(line) < 400, line


# ------------------------------------------------------------------------------ counts and models


def _job(tmp_path: Path, spec: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: j, namespace: team-a}\n"
        f"spec: {{queue: team-a, {spec}}}\n"
    )
    return path


@pytest.mark.parametrize(
    ("gpus", "said"),
    [("true", "True"), ('"4"', "'4'"), ("2.0", "2.0"), ("99999999999999999999", "99999999999999999999")],
)
def test_a_gpu_count_that_is_not_a_whole_number_of_gpus_is_refused(
    gpus: str, said: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = _job(tmp_path, f"replicas: 1, worker: {{gpus: {gpus}}}")
    line = one_line_error(cli("apply", "-f", str(path)), f"{path}:4:", "field spec.worker.gpus", said)
    assert "must be an integer" in line or "must be <= 72" in line


def test_a_trillion_replicas_are_refused(tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = _job(tmp_path, "replicas: 1000000000000, worker: {gpus: 99999999999999999999}")
    one_line_error(cli("apply", "-f", str(path)), "field spec.replicas", "must be <= 100000")


def test_an_unknown_gpu_model_on_a_job_is_refused_with_the_closest_models(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = _job(tmp_path, "replicas: 1, worker: {gpus: 1, gpuModel: H100-80B}")
    one_line_error(cli("apply", "-f", str(path)), "field spec.worker.gpuModel", "did you mean H100-80GB")
    path = _job(tmp_path, "replicas: 1, worker: {gpus: 1, gpuModel: [H100-80GB, A10O]}")
    one_line_error(cli("apply", "-f", str(path)), "field spec.worker.gpuModel[1]", "'A10O'", "did you mean")


# ------------------------------------------------------------------------------ kubeconfig


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    return path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (NOT_UTF8, "not UTF-8"),
        (None, "No such file"),
        (b"apiVersion: v1\nclusters: [\n", "not valid YAML"),
        (b"- a\n- b\n", "not a kubeconfig"),
        (b"apiVersion: v1\nkind: Config\n", "current-context"),
    ],
)
def test_a_kubeconfig_that_is_missing_or_not_one_is_named(
    content: bytes | None, said: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_bytes(content)
    # The scheduler and the operator open their connection the same way (cli.kube._transport).
    one_line_error(cli("kube", "install-crds", "--kubeconfig", str(path)), str(path), "--kubeconfig", said)


def test_no_kubeconfig_at_all_says_how_to_give_one(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    one_line_error(cli("kube", "install-crds"), "--kubeconfig", "KUBECONFIG")
    path = _kubeconfig(tmp_path, "http://127.0.0.1:1")
    one_line_error(cli("kube", "install-crds", "--kubeconfig", str(path), "--context", "nope"), "--context")


def test_install_crds_against_a_dead_server_says_it_did_not_answer(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    path = _kubeconfig(tmp_path, f"http://127.0.0.1:{port}")
    one_line_error(cli("kube", "install-crds", "--kubeconfig", str(path)), "did not answer", f"port={port}")
