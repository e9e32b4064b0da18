"""What the node agent reads for its GPU sharing: its Node's labels and the ConfigMap they name."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.kube.agent_config import NodeSharingConfig, SharingConfigWatcher
from gpufleet.kube.informer import Backoff

from .fakeapi import FakeApiServer
from .test_fleet import MERGE
from .test_scheduler import add_node

CONFIG_MAPS = "/api/v1/namespaces/gpu-ops/configmaps"


def config_map(api: FakeApiServer, name: str, data: dict[str, str]) -> None:
    api.request("POST", CONFIG_MAPS, body={"metadata": {"name": name}, "data": data})


def label(api: FakeApiServer, labels: dict[str, str | None]) -> None:
    api.request("PATCH", "/api/v1/nodes/n1", body={"metadata": {"labels": labels}}, content_type=MERGE)


class FakeClock:
    """Monotonic seconds that pass only when the test says."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def more_polls(watcher: SharingConfigWatcher, count: int) -> None:
    """Until the running watcher has read the Node `count` more times: it has seen what there is to see."""
    start = watcher.polls
    wait_until(f"{count} more reads", lambda: watcher.polls >= start + count)


def wait_until(what: str, check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_label_picks_the_entry_and_a_label_change_is_seen_at_the_next_read(api: FakeApiServer) -> None:
    config_map(api, "gpufleet-sharing-a", {"time-slicing-2": "A2", "mps-2": "AM"})
    config_map(api, "gpufleet-sharing-b", {"time-slicing-4": "B4"})
    labels = {"gpufleet.io/sharing-config": "gpufleet-sharing-a", "nvidia.com/device-plugin.config": "mps-2"}
    add_node(api, "n1", labels=labels)
    told: list[NodeSharingConfig | None] = []
    watcher = SharingConfigWatcher(api, "n1", "gpu-ops", told.append, resync=0.2)
    stop = threading.Event()
    watcher.start(stop)
    try:
        wait_until("the first selection", lambda: told)
        first = told[0]
        assert first is not None and first.config_map == "gpu-ops/gpufleet-sharing-a" and first.mig is None
        assert first.device_plugin is not None and first.device_plugin.text == "AM"

        # Another pool: only the Node changes, which is read every `resync`.
        label(
            api,
            {
                "gpufleet.io/sharing-config": "gpufleet-sharing-b",
                "nvidia.com/device-plugin.config": "time-slicing-4",
            },
        )
        wait_until("the new pool's entry", lambda: len(told) == 2)
        assert (
            told[1] is not None and told[1].device_plugin is not None and told[1].device_plugin.text == "B4"
        )

        # Out of every pool: None, once.
        label(api, {"gpufleet.io/sharing-config": None, "nvidia.com/device-plugin.config": None})
        wait_until("no selection", lambda: len(told) == 3)
        more_polls(watcher, 2)  # read again, and again: None is not told twice
        assert told[2:] == [None]
    finally:
        stop.set()


def test_an_unreachable_server_and_a_failed_apply_are_tried_again(api: FakeApiServer) -> None:
    config_map(api, "gpufleet-sharing-a", {"time-slicing-2": "A2"})
    labels = {
        "gpufleet.io/sharing-config": "gpufleet-sharing-a",
        "nvidia.com/device-plugin.config": "time-slicing-2",
    }
    add_node(api, "n1", labels=labels)
    calls: list[NodeSharingConfig | None] = []

    def flaky(selection: NodeSharingConfig | None) -> None:
        calls.append(selection)
        if len(calls) == 1:
            raise OSError("the plugin socket could not be served")

    watcher = SharingConfigWatcher(
        api, "n1", "gpu-ops", flaky, resync=0.2, backoff=Backoff(initial=0.05, maximum=0.1)
    )
    api.fail_next(3)
    stop = threading.Event()
    watcher.start(stop)
    try:
        wait_until("the apply tried again", lambda: len(calls) >= 2)
        assert calls[0] == calls[1]
        more_polls(watcher, 2)
        assert len(calls) == 2  # applied: not told again while nothing changes
    finally:
        stop.set()


def test_events_about_the_node_go_where_the_api_server_takes_them(api: FakeApiServer) -> None:
    add_node(api, "n1")
    watcher = SharingConfigWatcher(api, "n1", "gpu-ops", lambda _: None)
    watcher.read()
    watcher.report("SharingConfigInvalid", "ConfigMap x, key y: field z: bad", warning=True)
    (event,) = api.objects["/v1/events"].values()
    node = api.get("/api/v1/nodes/n1")
    assert event["metadata"]["namespace"] == "default" and event["type"] == "Warning"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": node["metadata"]["uid"],
        "resourceVersion": node["metadata"]["resourceVersion"],
    }


def test_a_missing_config_map_or_key_is_pending_not_told_and_the_node_is_read_again_soon(
    api: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpufleet.kube.agent_config")
    config_map(api, "gpufleet-sharing-a", {"time-slicing-2": "A2"})
    labels = {
        "gpufleet.io/sharing-config": "gpufleet-sharing-a",
        "nvidia.com/device-plugin.config": "time-slicing-4",
    }
    add_node(api, "n1", labels=labels)
    told: list[NodeSharingConfig | None] = []
    # A resync far beyond the test: only the short retry of a pending selection reads the Node again.
    watcher = SharingConfigWatcher(api, "n1", "gpu-ops", told.append, resync=30)
    stop = threading.Event()
    watcher.start(stop)
    try:
        wait_until("the Node read again", lambda: api.requests.count(("GET", "/api/v1/nodes/n1")) >= 2, 3)
        assert told == [] and watcher.pending  # nothing to apply yet: the config in force stays
        assert "has no key 'time-slicing-4'" in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

        label(api, {"nvidia.com/device-plugin.config": "time-slicing-2"})
        wait_until("the relabelled entry", lambda: told, 5)
        assert told[0] is not None and told[0].device_plugin is not None
        assert told[0].device_plugin.text == "A2" and not watcher.pending
    finally:
        stop.set()


def test_a_selection_still_pending_after_a_resync_is_a_warning_once(
    api: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Longer than the operator's relabelling takes: likely a mistake (a wrong --sharing-namespace)."""
    labels = {"gpufleet.io/sharing-config": "gpufleet-sharing-x", "nvidia.com/device-plugin.config": "mps-2"}
    add_node(api, "n1", labels=labels)
    clock = FakeClock()
    watcher = SharingConfigWatcher(api, "n1", "elsewhere", lambda _: None, resync=30, clock=clock)

    def warned() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.levelno == logging.WARNING]

    watcher.poll()
    clock.advance(29)
    watcher.poll()
    assert not warned()  # the operator's relabelling may still be under way
    clock.advance(1)
    watcher.poll()
    for _ in range(3):  # more reads while it lasts: said once
        clock.advance(30)
        watcher.poll()
    (warning,) = warned()
    assert "still missing after 30s" in warning.getMessage()
    assert "ConfigMap elsewhere/gpufleet-sharing-x (named by gpufleet.io/sharing-config) not found" in (
        warning.getMessage()
    )


def node_events(api: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    found = api.objects.get("/v1/events", {}).values()
    return [e for e in found if e["reason"] == reason and e["involvedObject"]["name"] == "n1"]


@pytest.mark.parametrize(
    ("data", "labels", "there", "missing"),
    [
        # A time-slicing pool's node the GPU Operator also labelled for its MIG manager.
        (
            {"time-slicing-4": "A4"},
            {"nvidia.com/device-plugin.config": "time-slicing-4", "nvidia.com/mig.config": "all-disabled"},
            "device_plugin",
            "mig",
        ),
        # A MIG pool's node with a device-plugin label someone else set.
        (
            {"gpufleet-p": "M"},
            {"nvidia.com/device-plugin.config": "time-slicing-9", "nvidia.com/mig.config": "gpufleet-p"},
            "mig",
            "device_plugin",
        ),
    ],
    ids=["foreign-mig-label", "foreign-device-plugin-label"],
)
def test_an_entry_that_is_missing_does_not_hold_back_the_one_that_is_there(
    api: FakeApiServer,
    caplog: pytest.LogCaptureFixture,
    data: dict[str, str],
    labels: dict[str, str],
    there: str,
    missing: str,
) -> None:
    config_map(api, "gpufleet-sharing-p", data)
    add_node(api, "n1", labels={"gpufleet.io/sharing-config": "gpufleet-sharing-p", **labels})
    told: list[NodeSharingConfig | None] = []
    clock = FakeClock()
    watcher = SharingConfigWatcher(api, "n1", "gpu-ops", told.append, resync=0.5, clock=clock)
    watcher.poll()
    (selection,) = told
    assert selection is not None
    present, absent = getattr(selection, there), getattr(selection, missing)
    assert present is not None and present.text == data[present.key]
    assert absent is not None and absent.text is None
    assert watcher.pending  # the Node is read again soon, for the missing one
    watcher.poll()
    assert len(told) == 1 and not node_events(api, "SharingConfigMissing")  # not told again, not yet said

    # Still missing after a resync: one warning and one Warning Event naming the ConfigMap and key.
    for _ in range(3):
        clock.advance(0.3)
        watcher.poll()
    (event,) = node_events(api, "SharingConfigMissing")
    assert event["type"] == "Warning"
    assert f"ConfigMap gpu-ops/gpufleet-sharing-p has no key {absent.key!r}" in event["message"]
    assert "the rest is applied without it" in event["message"]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert absent.key in warning.getMessage() and "gpufleet-sharing-p" in warning.getMessage()
    assert len(told) == 1

    # The entry appears: the selection is told again, with both.
    api.request(
        "PATCH",
        f"{CONFIG_MAPS}/gpufleet-sharing-p",
        body={"data": {absent.key: "NEW"}},
        content_type=MERGE,
    )
    watcher.poll()
    assert len(told) == 2 and told[1] is not None
    assert getattr(told[1], missing).text == "NEW" and getattr(told[1], there).text == data[present.key]
    assert not watcher.pending
    assert len(node_events(api, "SharingConfigMissing")) == 1


def test_a_selection_whose_every_entry_is_missing_is_not_told_but_said_once_with_an_event(
    api: FakeApiServer,
) -> None:
    labels = {"gpufleet.io/sharing-config": "gpufleet-sharing-x", "nvidia.com/device-plugin.config": "mps-2"}
    add_node(api, "n1", labels=labels)
    told: list[NodeSharingConfig | None] = []
    clock = FakeClock()
    watcher = SharingConfigWatcher(api, "n1", "gpu-ops", told.append, resync=0.2, clock=clock)
    for _ in range(4):
        watcher.poll()
        clock.advance(0.1)
    watcher.poll()
    assert told == [] and watcher.pending
    (event,) = node_events(api, "SharingConfigMissing")
    assert (
        "ConfigMap gpu-ops/gpufleet-sharing-x (named by gpufleet.io/sharing-config) not found"
        in (event["message"])
    )
    assert "key 'mps-2'" in event["message"] and "the config in force stays" in event["message"]


def test_a_missing_mig_entry_with_no_device_plugin_label_is_told_so_the_local_config_applies(
    api: FakeApiServer,
) -> None:
    config_map(api, "gpufleet-sharing-p", {"time-slicing-4": "A4"})
    labels = {"gpufleet.io/sharing-config": "gpufleet-sharing-p", "nvidia.com/mig.config": "all-disabled"}
    add_node(api, "n1", labels=labels)
    told: list[NodeSharingConfig | None] = []
    watcher = SharingConfigWatcher(api, "n1", "gpu-ops", told.append, resync=30)
    watcher.poll()
    (selection,) = told
    assert selection is not None and selection.device_plugin is None
    assert selection.mig is not None and selection.mig.text is None and watcher.pending
