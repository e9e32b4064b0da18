"""The NVIDIA-format config file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpufleet.agent.config import (
    DEFAULT_IGNORED_XIDS,
    load_config,
    overlay_named_config,
    parse_config,
    with_flags,
)
from gpufleet.api.errors import ValidationError

NVIDIA_EXAMPLE = """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  nvidiaDriverRoot: /run/nvidia/driver
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: envvar,cdi-annotations
    deviceIDStrategy: uuid
  gfd:
    oneshot: false
    noTimestamp: true
    sleepInterval: 30s
  useNodeFeatureAPI: false
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


def test_reads_a_file_written_for_the_nvidia_plugin(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(NVIDIA_EXAMPLE)
    config = load_config(path)
    assert config.flags.mig_strategy == "mixed"
    assert config.flags.plugin.device_list_strategy == ("envvar", "cdi-annotations")
    assert config.flags.gfd.no_timestamp
    assert config.sharing.strategy == "time-slicing"
    assert config.sharing.replication is not None
    assert config.sharing.replication.replicas("nvidia.com/gpu") == 10
    assert not config.sharing.fail_requests_greater_than_one


def test_defaults() -> None:
    config = load_config(None)
    assert config.flags.mig_strategy == "none"
    assert config.flags.plugin.device_list_strategy == ("envvar",)
    assert config.sharing.strategy == "none"
    assert config.health.ignored_xids == DEFAULT_IGNORED_XIDS
    assert config.health.is_critical(79) and not config.health.is_critical(13)


def test_mps_rejects_more_than_one_unit_by_default() -> None:
    config = parse_config({"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}})
    assert config.sharing.strategy == "mps"
    assert config.sharing.fail_requests_greater_than_one


def test_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"field flags.migStrategy"):
        parse_config({"flags": {"migStrategy": "half"}})
    with pytest.raises(ValidationError, match=r"field sharing: timeSlicing and mps are mutually exclusive$"):
        both = {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
        parse_config({"sharing": {"timeSlicing": both, "mps": both}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ValidationError, match=r"bad\.yaml: the config is a mapping"):
        load_config(bad)


def test_health_section_and_nvidia_environment_variables() -> None:
    health = parse_config({"health": {"ignoredXIDs": [94]}}).health
    assert health.ignored_xids == DEFAULT_IGNORED_XIDS | {94}
    assert not health.is_critical(94)
    only = parse_config({"health": {"criticalXIDs": [48, 79]}}).health
    assert only.is_critical(79) and not only.is_critical(63)

    env = health.with_env({"DP_DISABLE_HEALTHCHECKS": "63,64"})
    assert {63, 64} <= env.ignored_xids and not env.disabled
    assert health.with_env({"DP_DISABLE_HEALTHCHECKS": "all"}).disabled
    assert health.with_env({"DP_ENABLE_HEALTHCHECKS": "13"}).is_critical(13)


def test_errors_read_like_gpufleet_errors(tmp_path: Path) -> None:
    path = tmp_path / "sharing.yaml"
    path.write_text("sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 0}\n")
    with pytest.raises(ValidationError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: field sharing.timeSlicing.resources[0].replicas: must be at least 1, got 0"
    )
    assert "Value error" not in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        parse_config({"sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2}]}}}, where="c.yaml")
    assert str(caught.value).startswith("c.yaml: field sharing.mps.resources[0].name: resource names start")


def test_ignored_per_resource_fields_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    entries = [
        {"name": "nvidia.com/gpu", "replicas": 2, "rename": "nvidia.com/shared-gpu", "devices": [0, 1]},
        {"name": "nvidia.com/mig-1g.10gb", "replicas": 2, "devices": "all"},
    ]
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent.config"):
        config = parse_config({"sharing": {"timeSlicing": {"resources": entries}}}, where="ts.yaml")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "ts.yaml: field sharing.timeSlicing.resources[0].rename is ignored, as by NVIDIA's plugin",
        "ts.yaml: field sharing.timeSlicing.resources[0].devices is ignored, as by NVIDIA's plugin",
    ]
    assert (
        config.sharing.replication is not None and config.sharing.replication.replicas("nvidia.com/gpu") == 2
    )

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent.config"):
        parse_config(
            {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2, "rename": "x"}]}}}
        )
    assert [r.getMessage() for r in caplog.records] == [
        "config: field sharing.mps.resources[0].rename is ignored, as by NVIDIA's plugin"
    ]


LOCAL_FLAGS = {
    "nvidiaDriverRoot": "/run/nvidia/driver",
    "plugin": {"deviceIDStrategy": "index", "deviceListStrategy": "volume-mounts"},
    "gfd": {"sleepInterval": "30s"},
}


def test_a_named_configs_flags_are_merged_into_the_local_ones_field_by_field() -> None:
    """An entry that sets only flags.migStrategy (and one plugin flag) keeps every other local flag."""
    base = parse_config({"flags": LOCAL_FLAGS})
    entry = "version: v1\nflags:\n  migStrategy: mixed\n  plugin: {passDeviceSpecs: true}\n"
    flags = overlay_named_config(base, entry, where="ConfigMap ns/cm, key k").flags
    assert flags.mig_strategy == "mixed" and flags.plugin.pass_device_specs
    assert flags.nvidia_driver_root == "/run/nvidia/driver" and flags.gfd.sleep_interval == "30s"
    assert flags.plugin.device_id_strategy == "index"
    assert flags.plugin.device_list_strategy == ("volume-mounts",)
    # A flag the entry writes wins even when it writes the default value.
    reset = overlay_named_config(base, "flags: {plugin: {deviceIDStrategy: uuid}}\n", where="k")
    assert reset.flags.plugin.device_id_strategy == "uuid"
    assert reset.flags.plugin.device_list_strategy == ("volume-mounts",)


def test_a_named_configs_sharing_replaces_the_local_sharing_whole() -> None:
    local = {
        "timeSlicing": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    }
    base = parse_config({"flags": LOCAL_FLAGS, "sharing": local})
    entry = "sharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
    config = overlay_named_config(base, entry, where="k")
    assert config.sharing.strategy == "mps" and config.sharing.time_slicing is None
    assert config.flags == base.flags
    # Without a sharing section the local one stays.
    assert overlay_named_config(base, "flags: {migStrategy: mixed}\n", where="k").sharing == base.sharing


def test_pinned_flags_win_over_the_file_and_keep_its_other_flags() -> None:
    base = parse_config({"flags": {**LOCAL_FLAGS, "migStrategy": "single"}})
    pinned = with_flags(base, {"mig_strategy": "mixed"})
    assert pinned.flags.mig_strategy == "mixed"
    assert pinned.flags.model_copy(update={"mig_strategy": "single"}) == base.flags
    assert with_flags(base, {}) is base
