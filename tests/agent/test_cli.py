"""`gpufleet agent` and `gpufleet agent inspect`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from gpufleet.agent.nvml import RecordedNvml
from gpufleet.cli.main import app

from .fakes import FakeKubelet
from .test_exporter import _free_port

runner = CliRunner()


def test_inspect_prints_node_labels_and_devices() -> None:
    result = runner.invoke(app, ["agent", "inspect", "--profile", "hgx-h100"])
    assert result.exit_code == 0, result.output
    assert "hgx-h100-0" in result.output
    assert "NVLink domains [[0, 1, 2, 3, 4, 5, 6, 7]]" in result.output
    assert "nvidia.com/gpu.product" in result.output and "NVIDIA-H100-80GB-HBM3" in result.output
    assert "nvidia.com/gpu " in result.output or "nvidia.com/gpu│" in result.output.replace(" ", "")


def test_inspect_json_with_a_config(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("version: v1\nflags: {migStrategy: mixed}\n")
    result = runner.invoke(
        app, ["agent", "inspect", "--profile", "a100-80gb-mig", "--config", str(config), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert sorted(data["resources"]) == [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]
    assert data["labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert len(data["node"]["gpus"]) == 8


def test_inspect_shows_ignored_sharing_fields(tmp_path: Path) -> None:
    config = tmp_path / "ts.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 2, rename: nvidia.com/l4, devices: [0, 1]}\n"
    )
    args = ["agent", "inspect", "--profile", "pcie-l4", "--config", str(config)]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["warnings"] == [
        f"{config}: field sharing.timeSlicing.resources[0].rename is ignored, as by NVIDIA's plugin",
        f"{config}: field sharing.timeSlicing.resources[0].devices is ignored, as by NVIDIA's plugin",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: " in text and "resources[0].rename is ignored" in text and "resources[0].devices" in text


def test_inspect_record_writes_a_profile_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "node.json"
    result = runner.invoke(app, ["agent", "inspect", "--profile", "pcie-l4", "--record", str(out)])
    assert result.exit_code == 0, result.output
    assert RecordedNvml.from_profile(out).discover() == RecordedNvml.from_profile("pcie-l4").discover()


def _gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args], capture_output=True, text=True, timeout=60
    )


def test_user_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("flags: {migStrategy: single}\n")
    result = _gpufleet("agent", "inspect", "--profile", "a100-80gb-mig", "--config", str(bad))
    stderr = " ".join(result.stderr.split())  # rich wraps long lines
    assert result.returncode == 2
    assert (
        f"{bad}: field flags.migStrategy: MIG strategy 'single' needs one MIG profile on every GPU" in stderr
    )
    assert "Traceback" not in stderr
    result = _gpufleet("agent", "inspect", "--profile", "nope")
    assert result.returncode == 2 and "bundled: a100-80gb-mig" in " ".join(result.stderr.split())


def test_inspect_refuses_mps_on_gpus_in_mig_mode(tmp_path: Path) -> None:
    config = tmp_path / "mps.yaml"
    config.write_text(
        "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
    )
    result = runner.invoke(app, ["agent", "inspect", "--profile", "a100-80gb-mig", "--config", str(config)])
    assert result.exit_code != 0
    assert str(result.exception) == (
        f"{config}: field sharing.mps: MPS sharing is not supported on GPUs in MIG mode; "
        "MIG is enabled on GPUs 0, 1, 2, 3, 4, 5, 6, 7: disable MIG there or use timeSlicing"
    )


def test_agent_runs_until_sigterm(kubelet: FakeKubelet, short_dir: Path) -> None:
    port = _free_port()
    features = short_dir / "features.d" / "gfd"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "agent", "--node-name", "node-a", "--profile", "hgx-h100",
         "--plugin-dir", str(kubelet.dir), "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
         "--feature-file", str(features), "--no-label-node",
         "--pod-resources-socket", str(short_dir / "none.sock")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert kubelet.registration(timeout=30).resource_name == "nvidia.com/gpu"
        assert len(kubelet.next_list("nvidia.com/gpu").devices) == 8
        deadline = time.monotonic() + 10
        while not features.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "nvidia.com/gpu.count=8\n" in features.read_text()
        scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'Hostname="node-a"' in scrape
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert not (kubelet.dir / "nvidia-gpu.sock").exists()


MIG_RESOURCES = {"nvidia.com/mig-1g.10gb": 22, "nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-3g.40gb": 8}


def _inspect_resources(*args: str, env: dict[str, str] | None = None) -> dict[str, int]:
    result = runner.invoke(app, ["agent", "inspect", "--profile", "a100-80gb-mig", "--json", *args], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # GFD's label says which strategy is in force.
    mixed = any(name.startswith("nvidia.com/mig-") for name in data["resources"])
    assert data["labels"]["nvidia.com/mig.strategy"] == ("mixed" if mixed else "none")
    return {name: len(ids) for name, ids in data["resources"].items()}


def test_mig_strategy_order_is_nvidias_flag_then_environment_then_config_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("version: v1\nflags: {migStrategy: none}\n")
    whole = {"nvidia.com/gpu": 8}
    no_env = {"MIG_STRATEGY": ""}
    assert _inspect_resources("--config", str(config), env=no_env) == whole
    assert _inspect_resources("--config", str(config), env={"MIG_STRATEGY": "mixed"}) == MIG_RESOURCES
    assert _inspect_resources("--config", str(config), "--mig-strategy", "mixed", env=no_env) == MIG_RESOURCES
    # The flag wins over the environment, which wins over the file.
    mixed_file = tmp_path / "mixed.yaml"
    mixed_file.write_text("version: v1\nflags: {migStrategy: mixed}\n")
    assert _inspect_resources("--config", str(mixed_file), env={"MIG_STRATEGY": "none"}) == whole
    flag_over_env = ("--config", str(config), "--mig-strategy", "mixed")
    assert _inspect_resources(*flag_over_env, env={"MIG_STRATEGY": "none"}) == MIG_RESOURCES
    assert _inspect_resources("--mig-strategy", "none", env={"MIG_STRATEGY": "mixed"}) == whole


def test_a_mig_strategy_that_does_not_fit_names_the_option_not_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("version: v1\nflags: {migStrategy: mixed}\n")
    result = _gpufleet("agent", "inspect", "--profile", "a100-80gb-mig", "--config", str(config),
                       "--mig-strategy", "single")  # fmt: skip
    stderr = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stderr
    assert "--mig-strategy (or MIG_STRATEGY): MIG strategy 'single' needs one MIG profile" in stderr
    assert str(config) not in stderr


def _run_agent(
    kubelet: FakeKubelet, short_dir: Path, *args: str, env: dict[str, str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "agent", "--node-name", "node-a",
         "--profile", "a100-80gb-mig", "--plugin-dir", str(kubelet.dir), "--metrics-port", "0",
         "--feature-file", str(_features(short_dir)), "--no-label-node", "--no-sharing-config",
         "--pod-resources-socket", str(short_dir / "none.sock"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )  # fmt: skip


def _features(short_dir: Path) -> Path:
    return short_dir / "features"


def _wait_started(short_dir: Path) -> None:
    """Until the agent has served and registered every plugin it runs: it writes its node-feature file
    only after that, so from then on no registration is still to come."""
    deadline = time.monotonic() + 30
    while not _features(short_dir).exists():
        assert time.monotonic() < deadline, "the agent never finished starting"
        time.sleep(0.05)


def _registered(kubelet: FakeKubelet, count: int) -> dict[str, int]:
    """The resources the first `count` registrations name, with the devices each lists."""
    names = [kubelet.registration(timeout=30).resource_name for _ in range(count)]
    return {name: len(kubelet.next_list(name, timeout=15).devices) for name in names}


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    return output


def test_the_agent_with_mig_strategy_mixed_advertises_each_mig_profile(
    kubelet: FakeKubelet, short_dir: Path
) -> None:
    """The recorded A100 node in MIG mode: one device plugin per profile, as the chart runs it."""
    proc = _run_agent(kubelet, short_dir, "--mig-strategy", "mixed", env={"MIG_STRATEGY": "none"})
    try:
        assert _registered(kubelet, 3) == MIG_RESOURCES
        _wait_started(short_dir)
        assert kubelet.registrations.empty()
    finally:
        _stop(proc)
    assert {p.name for p in kubelet.dir.glob("*.sock")} == {"kubelet.sock"}


def test_the_agent_with_mig_strategy_none_advertises_mig_mode_gpus_whole(
    kubelet: FakeKubelet, short_dir: Path
) -> None:
    """From the environment (MIG_STRATEGY) over a config file that asks for mixed."""
    config = short_dir / "c.yaml"
    config.write_text("version: v1\nflags: {migStrategy: mixed}\n")
    proc = _run_agent(kubelet, short_dir, "--config", str(config), env={"MIG_STRATEGY": "none"})
    try:
        assert _registered(kubelet, 1) == {"nvidia.com/gpu": 8}
        _wait_started(short_dir)  # a plugin per MIG profile would have registered by now
        assert kubelet.registrations.empty()
    finally:
        _stop(proc)
