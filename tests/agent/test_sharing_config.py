"""The agent takes its GPU sharing from its pool's ConfigMap, as NVIDIA's plugin does under the GPU
Operator's config-manager: the operator writes the ConfigMap and labels the Node (the real operator
code runs here against the in-memory API server), the agent follows them and its device plugin
re-registers with kubelet (a fake one over real gRPC) with the replicas the selected entry asks for."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.agent import migparted
from gpufleet.agent.config import AgentConfig, parse_config, with_flags
from gpufleet.agent.nvml import RecordedNvml
from gpufleet.agent.runtime import Agent
from gpufleet.api.errors import ValidationError
from gpufleet.cli.agent import PoolSharing
from gpufleet.kube.agent_config import SharingConfigWatcher
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.operator import Operator
from kube.fake_http import serve, write_kubeconfig
from kube.fakeapi import FakeApiServer
from kube.test_fleet import MERGE, POOLS, make_pool, sync
from kube.test_operator import Clock
from kube.test_scheduler import add_node

from .fakes import FakeKubelet
from .test_exporter import _free_port

NS = "gpu-ops"
NODE = "node-a"
CONFIG_MAPS = f"/api/v1/namespaces/{NS}/configmaps"
GPU = "nvidia.com/gpu"


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def operator(api: FakeApiServer) -> Operator:
    return Operator(api, config=KubeConfig(namespace=NS), clock=Clock())


def shared_pool(api: FakeApiServer, operator: Operator, replicas: int) -> None:
    """A pool time-slicing its GPUs `replicas` ways with the agent's node in it, as the operator
    leaves it: the ConfigMap `gpufleet-sharing-ts` and the Node's labels."""
    make_pool(api, "ts", sharing={"timeSlicing": {"replicas": replicas}})
    add_node(api, NODE, labels={"pool": "ts"})
    sync(operator)


def edit_entry(api: FakeApiServer, key: str, text: str) -> None:
    """What someone editing the ConfigMap by hand does: one entry's text changes, nothing else."""
    path = f"{CONFIG_MAPS}/gpufleet-sharing-ts"
    api.request("PATCH", path, body={"data": {key: text}}, content_type=MERGE)


def time_slicing(replicas: int, resource: str = GPU) -> str:
    document = {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": resource, "replicas": replicas}]}},
    }
    return yaml.safe_dump(document)


def events(api: FakeApiServer, reason: str) -> list[dict]:
    # Events about a Node live in default (the API server refuses them elsewhere).
    found = [e for (ns, _), e in api.objects.get("/v1/events", {}).items() if ns == "default"]
    return [e for e in found if e["reason"] == reason and e["involvedObject"]["name"] == NODE]


def wait_until(what: str, check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def advertised(kubelet: FakeKubelet, resource: str, count: int) -> list[str]:
    """The device IDs of the newest ListAndWatch answer for `resource` once it has `count` devices
    (a re-registration opens a new stream; answers of the old one may still be queued)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        ids = [d.ID for d in kubelet.next_list(resource, timeout=15).devices]
        if len(ids) == count:
            return ids
    raise AssertionError(f"{resource} never advertised {count} devices")


class Following:
    """An agent over a recorded node (HGX H100 unless told) and the fake kubelet, following its Node's
    sharing config."""

    def __init__(
        self,
        api: FakeApiServer,
        kubelet: FakeKubelet,
        base: AgentConfig,
        resync: float,
        profile: str,
        pinned: dict[str, Any],
    ) -> None:
        base = with_flags(base, pinned)  # as the CLI: --mig-strategy over the local config
        self.agent = Agent(
            RecordedNvml.from_profile(profile),
            base,
            node_name=NODE,
            plugin_dir=kubelet.dir,
            metrics_port=None,
            kubelet_poll_interval=0.05,
        )
        self.apply = PoolSharing(self.agent, base, "the default config", pinned=pinned)
        self.watcher = SharingConfigWatcher(api, NODE, NS, self.apply, resync=resync)
        self.apply.report = self.watcher.report
        self.stop = threading.Event()

    def start(self) -> Following:
        self.watcher.poll()  # as the CLI: the plugins register with the pool's config from the start
        self.agent.start()
        self.watcher.start(self.stop)
        return self

    def close(self) -> None:
        self.stop.set()
        self.agent.stop()


@pytest.fixture
def follow(api: FakeApiServer, kubelet: FakeKubelet) -> Iterator[Callable[..., Following]]:
    started: list[Following] = []

    def start(
        resync: float = 0.2,
        base: AgentConfig | None = None,
        profile: str = "hgx-h100",
        pinned: dict[str, Any] | None = None,
    ) -> Following:
        base = base or parse_config({"health": {"disabled": True}})
        running = Following(api, kubelet, base, resync, profile, pinned or {})
        started.append(running.start())
        return running

    yield start
    for running in started:
        running.close()


def test_the_pools_time_slicing_is_advertised_and_follows_the_config_map_and_the_label(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    shared_pool(api, operator, replicas=4)
    # A resync far beyond the test: changes of the ConfigMap must come through its watch.
    running = follow(resync=30)
    uuids = [gpu.uuid for gpu in running.agent.node.gpus]
    assert kubelet.registration().resource_name == GPU
    assert advertised(kubelet, GPU, 32) == [f"{u}::{i}" for u in uuids for i in range(4)]
    assert running.agent.labels()["nvidia.com/gpu.replicas"] == "4"
    applied = events(api, "SharingConfigApplied")
    assert "ConfigMap gpu-ops/gpufleet-sharing-ts, key time-slicing-4" in applied[0]["message"]

    # The entry edited in place: re-applied without a restart of the agent.
    edit_entry(api, "time-slicing-4", time_slicing(3))
    assert kubelet.registration().resource_name == GPU
    assert advertised(kubelet, GPU, 24) == [f"{u}::{i}" for u in uuids for i in range(3)]

    # The pool's sharing changes: the operator rewrites the ConfigMap and relabels the Node.
    patch = {"spec": {"sharing": {"timeSlicing": {"replicas": 2}}}}
    api.request("PATCH", f"{POOLS}/ts", body=patch, content_type=MERGE)
    sync(operator)
    assert advertised(kubelet, GPU, 16) == [f"{u}::{i}" for u in uuids for i in range(2)]

    # The plugin serves the new devices a moment before the agent records the config in force.
    def replicas() -> int:
        sharing = running.agent.config.sharing.time_slicing
        return 0 if sharing is None else sharing.replicas(GPU)

    wait_until("two replicas in force", lambda: replicas() == 2)

    # The pool stops sharing: no label, so the local config (whole GPUs) is back.
    api.request("PATCH", f"{POOLS}/ts", body={"spec": {"sharing": None}}, content_type=MERGE)
    sync(operator)
    assert advertised(kubelet, GPU, 8) == uuids
    wait_until("whole GPUs in force", lambda: running.agent.config.sharing.strategy == "none")


def test_mps_from_the_config_map_is_what_the_plugin_serves(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    make_pool(api, "ts", sharing={"mps": {"replicas": 2}})
    add_node(api, NODE, labels={"pool": "ts"})
    sync(operator)
    running = follow()
    assert len(advertised(kubelet, GPU, 16)) == 16
    assert running.agent.config.sharing.strategy == "mps"
    assert running.agent.config.sharing.fail_requests_greater_than_one


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (time_slicing(0), "field sharing.timeSlicing.resources[0].replicas: must be at least 1, got 0"),
        (
            time_slicing(2, "nvidia.com/mig-1g.10gb"),
            "field sharing: sharing names resource 'nvidia.com/mig-1g.10gb'",
        ),
        ("version: v2\n", "field version:"),
        ("sharing: [oops\n", "not valid YAML"),
    ],
    ids=["replicas-0", "resource-the-node-lacks", "unknown-version", "not-yaml"],
)
def test_a_config_that_cannot_be_applied_is_refused_naming_configmap_key_and_field_and_the_previous_stays(
    api: FakeApiServer,
    operator: Operator,
    kubelet: FakeKubelet,
    follow: Callable[..., Following],
    text: str,
    field: str,
) -> None:
    shared_pool(api, operator, replicas=4)
    running = follow()
    assert len(advertised(kubelet, GPU, 32)) == 32
    before = running.agent.config
    registrations = running.agent.plugins.registrations

    edit_entry(api, "time-slicing-4", text)
    refused = wait_until("the Warning Event", lambda: events(api, "SharingConfigInvalid"))
    assert refused[0]["type"] == "Warning"
    message = refused[0]["message"]
    assert message.startswith("ConfigMap gpu-ops/gpufleet-sharing-ts, key time-slicing-4: "), message
    assert field in message and message.endswith("the config in force stays")
    # Nothing was applied: the same config, no re-registration, the plugin still serves 4 replicas.
    assert running.agent.config == before
    assert running.agent.plugins.registrations == registrations
    assert [len(r.devices) for r in running.agent.resources] == [32]

    # Fixed: applied again.
    edit_entry(api, "time-slicing-4", time_slicing(2))
    assert len(advertised(kubelet, GPU, 16)) == 16


def test_a_label_naming_a_missing_config_map_or_key_is_pending_and_the_local_config_stays(
    api: FakeApiServer,
    kubelet: FakeKubelet,
    follow: Callable[..., Following],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet")
    labels = {
        "gpufleet.io/sharing-config": "gpufleet-sharing-gone",
        "nvidia.com/device-plugin.config": "time-slicing-4",
    }
    add_node(api, NODE, labels=labels)
    running = follow(resync=30)
    wait_until("the pending selection logged", lambda: running.watcher.pending)
    assert "ConfigMap gpu-ops/gpufleet-sharing-gone (named by gpufleet.io/sharing-config) not found" in (
        caplog.text
    )
    assert len(advertised(kubelet, GPU, 8)) == 8
    assert running.agent.config.sharing.strategy == "none"

    # The ConfigMap appears (without that key, then with it): watched by name, picked up.
    body = {"metadata": {"name": "gpufleet-sharing-gone"}, "data": {"mps-2": time_slicing(2)}}
    api.request("POST", CONFIG_MAPS, body=body)
    wait_until("the missing key logged", lambda: "has no key 'time-slicing-4'" in caplog.text)
    api.request(
        "PATCH",
        f"{CONFIG_MAPS}/gpufleet-sharing-gone",
        body={"data": {"time-slicing-4": time_slicing(4)}},
        content_type=MERGE,
    )
    assert len(advertised(kubelet, GPU, 32)) == 32
    # Missing is not wrong: no Warning Event at any point, and an applied one once it is there.
    assert events(api, "SharingConfigInvalid") == []
    assert events(api, "SharingConfigApplied")
    assert not running.watcher.pending


def test_a_relabelled_node_is_read_again_soon_when_its_old_entry_is_gone(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    """The ConfigMap changed before the Node's label (as the operator once wrote them, or a garbage
    collector deleting a pool's ConfigMap): the agent waits with the config in force, and reads the
    Node again within seconds, not at the next resync."""
    shared_pool(api, operator, replicas=4)
    running = follow(resync=30)
    assert len(advertised(kubelet, GPU, 32)) == 32
    before = running.agent.config

    path = f"{CONFIG_MAPS}/gpufleet-sharing-ts"
    api.request(
        "PATCH",
        path,
        body={"data": {"time-slicing-4": None, "time-slicing-2": time_slicing(2)}},
        content_type=MERGE,
    )
    wait_until("the selection pending", lambda: running.watcher.pending)
    assert running.agent.config == before
    assert [len(r.devices) for r in running.agent.resources] == [32]

    # Only the Node changes now: no ConfigMap event, so only an early read of the Node sees it.
    api.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        body={"metadata": {"labels": {"nvidia.com/device-plugin.config": "time-slicing-2"}}},
        content_type=MERGE,
    )
    wait_until("the new entry applied", lambda: [len(r.devices) for r in running.agent.resources] == [16], 5)
    assert events(api, "SharingConfigInvalid") == []


def test_the_local_config_keeps_what_the_named_config_does_not_set(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    """The operator's entries set only `sharing`: the local file's flags (device ID strategy) stay."""
    shared_pool(api, operator, replicas=2)
    base = parse_config({"flags": {"plugin": {"deviceIDStrategy": "index"}}, "health": {"disabled": True}})
    running = follow(base=base)
    assert len(advertised(kubelet, GPU, 16)) == 16
    assert running.agent.config.flags == base.flags
    assert running.agent.config.sharing.time_slicing is not None


# The recorded A100 node's MIG layout, as a GPUPool writes it: GPUs 4 and 5 take the `*` entry.
A100_LAYOUT = {
    **{str(i): ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"] for i in range(4)},
    "*": ["1g.10gb"] * 7,
    **{str(i): ["3g.40gb", "3g.40gb"] for i in (6, 7)},
}


def mig_pool(api: FakeApiServer, operator: Operator, layout: dict[str, list[str]]) -> None:
    make_pool(api, "mig", gpuModel="A100-80GB", sharing={"mig": layout})
    add_node(api, NODE, labels={"pool": "mig"})
    sync(operator)


def test_a_mig_pools_layout_is_checked_against_what_nvml_reports(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    mig_pool(api, operator, {"*": ["1g.10gb"] * 7})
    running = follow(profile="a100-80gb-mig")
    pending = wait_until("the pending layout reported", lambda: events(api, "MigLayoutPending"))
    message = pending[0]["message"]
    assert message.startswith("ConfigMap gpu-ops/gpufleet-sharing-mig, key all-1g.10gb: not in place on ")
    assert "GPU 0: has 1g.10gb x2, 2g.20gb x1, 3g.40gb x1, wants 1g.10gb x7" in message
    assert "GPU 6: has 3g.40gb x2, wants 1g.10gb x7" in message and "GPU 4:" not in message
    # The device plugin entry is absent (MIG only): the local config stays, nothing is refused.
    assert running.agent.config.sharing.strategy == "none" and not events(api, "SharingConfigInvalid")
    assert len(advertised(kubelet, GPU, 8)) == 8


def test_a_mig_layout_already_in_place_is_reported_so(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    mig_pool(api, operator, A100_LAYOUT)
    follow(profile="a100-80gb-mig")
    in_place = wait_until("the layout reported in place", lambda: events(api, "MigLayoutInPlace"))
    assert in_place[0]["message"] == (
        "ConfigMap gpu-ops/gpufleet-sharing-mig, key gpufleet-mig: every GPU has its MIG layout"
    )
    assert not events(api, "MigLayoutPending")
    assert len(advertised(kubelet, GPU, 8)) == 8


def test_a_mig_label_gpufleet_did_not_set_does_not_hold_back_the_pools_time_slicing(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    """The GPU Operator may label every GPU node `nvidia.com/mig.config=all-disabled`: the pool's
    ConfigMap never has that key, yet its time-slicing is applied; the MIG part waits (no check, no
    MIG Event) and, once that lasts a resync, one Warning Event says what is missing."""
    shared_pool(api, operator, replicas=4)
    label_node(api, {"nvidia.com/mig.config": "all-disabled"})
    running = follow(resync=0.2)
    assert len(advertised(kubelet, GPU, 32)) == 32
    assert running.agent.config.sharing.time_slicing is not None
    (missing,) = wait_until("the missing entry reported", lambda: events(api, "SharingConfigMissing"))
    assert missing["type"] == "Warning"
    assert "ConfigMap gpu-ops/gpufleet-sharing-ts has no key 'all-disabled'" in missing["message"]
    polls = running.watcher.polls
    wait_until("two more reads", lambda: running.watcher.polls >= polls + 2)  # said once
    assert len(events(api, "SharingConfigMissing")) == 1
    assert not events(api, "MigLayoutPending") and not events(api, "MigLayoutInPlace")
    assert not events(api, "SharingConfigInvalid")


def test_a_device_plugin_label_naming_a_missing_entry_leaves_the_config_in_force_and_the_mig_check_runs(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    mig_pool(api, operator, A100_LAYOUT)
    label_node(api, {"nvidia.com/device-plugin.config": "time-slicing-2"})
    running = follow(profile="a100-80gb-mig")
    in_place = wait_until("the layout reported in place", lambda: events(api, "MigLayoutInPlace"))
    assert "key gpufleet-mig" in in_place[0]["message"]
    assert running.agent.config.sharing.strategy == "none"  # the device plugin config in force stays
    assert len(advertised(kubelet, GPU, 8)) == 8
    assert not events(api, "SharingConfigApplied") and not events(api, "SharingConfigInvalid")


# What the recorded A100 node advertises under the mixed strategy: one resource per MIG profile.
A100_MIXED = {"nvidia.com/mig-1g.10gb": 22, "nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-3g.40gb": 8}


def registered(kubelet: FakeKubelet, count: int) -> dict[str, int]:
    """The resources of the next `count` registrations, with the devices each advertises."""
    names = [kubelet.registration().resource_name for _ in range(count)]
    return {name: len(kubelet.next_list(name, timeout=15).devices) for name in names}


def label_node(api: FakeApiServer, labels: dict[str, str]) -> None:
    body = {"metadata": {"labels": labels}}
    api.request("PATCH", f"/api/v1/nodes/{NODE}", body=body, content_type=MERGE)


def test_a_mig_pool_under_the_cluster_wide_mixed_strategy_advertises_its_mig_profiles(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    """The chart's agent.migStrategy (--mig-strategy mixed): a MIG pool's ConfigMap has no device
    plugin entry, yet its node advertises nvidia.com/mig-<profile>, not 8 whole GPUs."""
    mig_pool(api, operator, A100_LAYOUT)
    running = follow(profile="a100-80gb-mig", pinned={"mig_strategy": "mixed"})
    assert registered(kubelet, 3) == A100_MIXED
    wait_until("the layout reported in place", lambda: events(api, "MigLayoutInPlace"))
    assert running.agent.labels()["nvidia.com/mig.strategy"] == "mixed"
    assert "nvidia.com/gpu" not in {r.name for r in running.agent.resources}


def test_a_pinned_mig_strategy_wins_over_an_entrys_flags(
    api: FakeApiServer,
    operator: Operator,
    kubelet: FakeKubelet,
    follow: Callable[..., Following],
    caplog: pytest.LogCaptureFixture,
) -> None:
    mig_pool(api, operator, A100_LAYOUT)
    running = follow(profile="a100-80gb-mig", pinned={"mig_strategy": "mixed"})
    assert registered(kubelet, 3) == A100_MIXED
    registrations = running.agent.plugins.registrations
    # A device plugin entry written by hand into the pool's ConfigMap, asking for none.
    path = f"{CONFIG_MAPS}/gpufleet-sharing-mig"
    entry = "version: v1\nflags: {migStrategy: none}\n"
    api.request("PATCH", path, body={"data": {"hand-written": entry}}, content_type=MERGE)
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent"):
        label_node(api, {"nvidia.com/device-plugin.config": "hand-written"})
        wait_until(
            "the override logged",
            lambda: any("is overridden by --mig-strategy" in r.getMessage() for r in caplog.records),
        )
    warning = next(r.getMessage() for r in caplog.records if "overridden" in r.getMessage())
    assert warning == (
        "ConfigMap gpu-ops/gpufleet-sharing-mig, key hand-written: flags.migStrategy 'none' is "
        "overridden by --mig-strategy (or MIG_STRATEGY) 'mixed'"
    )
    assert running.agent.config.flags.mig_strategy == "mixed"
    assert running.agent.plugins.registrations == registrations  # nothing changed, no re-registration
    assert not events(api, "SharingConfigInvalid")


def test_an_entry_setting_only_the_mig_strategy_keeps_the_local_flags(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, follow: Callable[..., Following]
) -> None:
    """Without a pinned strategy an entry's flags.migStrategy applies; the other local flags stay."""
    mig_pool(api, operator, A100_LAYOUT)
    local = {"plugin": {"deviceIDStrategy": "index"}, "nvidiaDriverRoot": "/run/nvidia/driver"}
    base = parse_config({"flags": local, "health": {"disabled": True}})
    running = follow(profile="a100-80gb-mig", base=base)
    assert registered(kubelet, 1) == {GPU: 8}
    path = f"{CONFIG_MAPS}/gpufleet-sharing-mig"
    entry = "version: v1\nflags: {migStrategy: mixed}\n"
    api.request("PATCH", path, body={"data": {"mixed": entry}}, content_type=MERGE)
    label_node(api, {"nvidia.com/device-plugin.config": "mixed"})
    assert registered(kubelet, 3) == A100_MIXED
    flags = running.agent.config.flags
    assert flags.mig_strategy == "mixed" and flags.plugin.device_id_strategy == "index"
    assert flags.nvidia_driver_root == "/run/nvidia/driver"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (
            {"devices": "all", "mig-enabled": True, "mig-devices": {"9g.99gb": 1}},
            "field mig-configs.all-1g.10gb[0].mig-devices.9g.99gb: GPU 0 (A100-80GB) has no MIG profile",
        ),
        (
            {"devices": [8], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            "field mig-configs.all-1g.10gb[0].devices: GPU 8 is not on this node (it has 8)",
        ),
        (
            {"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 2}},
            "field mig-configs.all-1g.10gb[0].mig-devices: GPU 0 (A100-80GB): MIG layout",
        ),
        (
            {"devices": "all", "mig-enabled": True, "mig-device": {"1g.10gb": 7}},
            "field mig-configs.all-1g.10gb[0].mig-device: Extra inputs are not permitted",
        ),
    ],
    ids=["unknown-profile", "missing-gpu", "does-not-fit", "misspelt-field"],
)
def test_a_mig_entry_that_cannot_be_applied_is_refused_naming_the_field(
    api: FakeApiServer,
    operator: Operator,
    kubelet: FakeKubelet,
    follow: Callable[..., Following],
    entry: dict,
    field: str,
) -> None:
    mig_pool(api, operator, {"*": ["1g.10gb"] * 7})
    follow(profile="a100-80gb-mig")
    wait_until("the first check", lambda: events(api, "MigLayoutPending"))
    text = yaml.safe_dump({"version": "v1", "mig-configs": {"all-1g.10gb": [entry]}})
    path = f"{CONFIG_MAPS}/gpufleet-sharing-mig"
    api.request("PATCH", path, body={"data": {"all-1g.10gb": text}}, content_type=MERGE)
    refused = wait_until("the Warning Event", lambda: events(api, "SharingConfigInvalid"))
    message = refused[0]["message"]
    assert message.startswith("ConfigMap gpu-ops/gpufleet-sharing-mig, key all-1g.10gb: "), message
    assert field in message
    assert len(advertised(kubelet, GPU, 8)) == 8


def test_mig_parteds_own_config_format_is_read() -> None:
    """An entry as mig-parted's example configs write it (`all-balanced`), over the recorded A100 node:
    GPUs 0-3 have that layout, the others do not."""
    text = (
        "version: v1\nmig-configs:\n  all-balanced:\n    - devices: all\n      mig-enabled: true\n"
        '      mig-devices:\n        "1g.10gb": 2\n        "2g.20gb": 1\n        "3g.40gb": 1\n'
        "  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
    )
    node = RecordedNvml.from_profile("a100-80gb-mig").discover()
    pending = migparted.check(text, "all-balanced", node, where="mig-parted.yaml")
    assert [line.split(":")[0] for line in pending] == ["GPU 4", "GPU 5", "GPU 6", "GPU 7"]
    disabled = migparted.check(text, "all-disabled", node, where="mig-parted.yaml")
    assert disabled[0] == "GPU 0: has 1g.10gb x2, 2g.20gb x1, 3g.40gb x1, wants MIG disabled"
    with pytest.raises(ValidationError, match=r"mig-parted.yaml: field mig-configs: no config 'all-3g'"):
        migparted.check(text, "all-3g", node, where="mig-parted.yaml")


def test_the_agent_cli_follows_the_config_map_through_the_official_client(
    api: FakeApiServer, operator: Operator, kubelet: FakeKubelet, short_dir: Path
) -> None:
    """`gpufleet agent` as the DaemonSet runs it, against the stand-in served over HTTP."""
    shared_pool(api, operator, replicas=4)
    server = serve(api)
    kubeconfig = short_dir / "kubeconfig"
    write_kubeconfig(kubeconfig, server.server_address[1])
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "agent", "--node-name", NODE, "--profile", "hgx-h100",
         "--plugin-dir", str(kubelet.dir), "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
         "--feature-file", "", "--no-label-node", "--pod-resources-socket", str(short_dir / "none.sock"),
         "--sharing-config", "--sharing-namespace", NS, "--sharing-resync", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**env, "PYTHONUNBUFFERED": "1", "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip
    try:
        assert kubelet.registration(timeout=30).resource_name == GPU
        assert len(advertised(kubelet, GPU, 32)) == 32
        edit_entry(api, "time-slicing-4", time_slicing(0))
        wait_until("the Warning Event", lambda: events(api, "SharingConfigInvalid"), timeout=20)
        edit_entry(api, "time-slicing-4", time_slicing(2))
        assert len(advertised(kubelet, GPU, 16)) == 16
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        server.shutdown()
    assert proc.returncode == 0, output
    assert "sharing config refused, the one in force stays" in output
    assert "field sharing.timeSlicing.resources[0].replicas" in output
