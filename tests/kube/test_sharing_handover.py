"""A pool's sharing change never leaves a node's labels naming an entry its ConfigMap lacks.

The operator writes the pool's ConfigMap and relabels the pool's nodes one by one; a node agent that
reads its Node between two of those writes must find what the labels name. Here every write the
operator makes is followed by a look at all Nodes and ConfigMaps, as an agent could take one then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from gpufleet.kube.agent_config import NodeSharingConfig, SharingConfigWatcher
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.operator import Operator
from gpufleet.kube.transport import Json

from .fakeapi import FakeApiServer, _status
from .test_fleet import MERGE, POOLS, get_node, make_pool, sync
from .test_operator import Clock
from .test_scheduler import add_node

NS = "gpu-ops"
SHARING_LABELS = ("nvidia.com/device-plugin.config", "nvidia.com/mig.config")


class Observed(FakeApiServer):
    """The stand-in API server, noting after each write every node label that names a missing
    ConfigMap or entry; PATCHes of the Nodes in `refuse` (and PUTs of ConfigMaps while
    `refuse_config_maps`) fail once with 503."""

    def __init__(self) -> None:
        super().__init__()
        self.dangling: list[str] = []
        self.refuse: set[str] = set()
        self.refuse_config_maps = False
        self.node_patch_delay = 0.0

    def request(self, method: str, path: str, **kw: Any) -> Json:
        if method == "PATCH" and path.startswith("/api/v1/nodes/"):
            name = path.rsplit("/", 1)[1]
            if name in self.refuse:
                self.refuse.discard(name)
                raise _status(503, "ServiceUnavailable", "unavailable")
            time.sleep(self.node_patch_delay)  # one round trip to a real server
        if method == "PUT" and "/configmaps/" in path and self.refuse_config_maps:
            self.refuse_config_maps = False
            raise _status(503, "ServiceUnavailable", "unavailable")
        answer = super().request(method, path, **kw)
        if method != "GET":
            with self.lock:
                self.dangling += dangling(self.objects)
        return answer


def dangling(objects: Mapping[str, dict[tuple[str, str], Json]]) -> list[str]:
    """`node: label=value` for each sharing label that names a ConfigMap or entry that does not exist."""
    config_maps = objects.get("/v1/configmaps", {})
    found = []
    for node in objects.get("/v1/nodes", {}).values():
        labels = node["metadata"].get("labels") or {}
        name = labels.get("gpufleet.io/sharing-config")
        if not name:
            continue
        config_map = config_maps.get((NS, name))
        data = (config_map or {}).get("data") or {}
        for label in SHARING_LABELS:
            if label in labels and labels[label] not in data:
                found.append(
                    f"{node['metadata']['name']}: {label}={labels[label]} (in {name}: {sorted(data)})"
                )
    return found


@pytest.fixture
def api() -> Observed:
    return Observed()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def op(api: Observed, clock: Clock) -> Operator:
    return Operator(api, config=KubeConfig(namespace=NS), clock=clock)


def later_round(op: Operator, clock: Clock) -> None:
    """The operator's next round once what it put off is due, from fresh informer copies."""
    clock.now += 10
    for informer in (op.nodes, op.pools):
        informer.relist()
    op.reconcile_once()


def config_data(api: FakeApiServer, pool: str) -> dict[str, str] | None:
    found = api.objects.get("/v1/configmaps", {}).get((NS, f"gpufleet-sharing-{pool}"))
    return None if found is None else dict(found.get("data") or {})


def labelled(api: FakeApiServer, node: str, label: str) -> str | None:
    labels: dict[str, str] = get_node(api, node)["metadata"].get("labels") or {}
    return labels.get(label)


def pool_with_nodes(api: Observed, op: Operator, sharing: Json, *, gpu_model: str = "H100-80GB") -> None:
    make_pool(api, "p", gpuModel=gpu_model, sharing=sharing)
    for name in ("n1", "n2", "n3"):
        add_node(api, name, labels={"pool": "p"})
    sync(op)
    assert api.dangling == []


UNIFORM_MIG = {"mig": {"*": ["1g.10gb"] * 7}}
MIXED_MIG = {"mig": {"*": ["3g.40gb", "3g.40gb"], "0": ["7g.80gb"]}}


DEVICE_PLUGIN, MIG = SHARING_LABELS
TS4 = {"timeSlicing": {"replicas": 4}}


@pytest.mark.parametrize(
    ("before", "after", "label", "entries"),
    [
        (TS4, {"timeSlicing": {"replicas": 8}}, DEVICE_PLUGIN, ["time-slicing-8"]),
        (TS4, {"timeSlicing": None, "mps": {"replicas": 2}}, DEVICE_PLUGIN, ["mps-2"]),
        (UNIFORM_MIG, MIXED_MIG, MIG, ["gpufleet-p"]),
        (TS4, None, DEVICE_PLUGIN, None),
    ],
    ids=["more-replicas", "time-slicing-to-mps", "uniform-to-mixed-mig", "stops-sharing"],
)
def test_the_pools_nodes_always_find_the_entry_their_labels_name(
    api: Observed, op: Operator, before: Json, after: Json | None, label: str, entries: list[str] | None
) -> None:
    pool_with_nodes(api, op, before, gpu_model="A100-80GB" if "mig" in before else "H100-80GB")
    # The pool's sharing changes (a merge patch: None drops a strategy, or sharing as a whole).
    api.request("PATCH", f"{POOLS}/p", body={"spec": {"sharing": after}}, content_type=MERGE)
    sync(op)
    assert api.dangling == []
    # One round does it all: the nodes pick the new entries and the old ones are gone.
    assert (
        config_data(api, "p") is None if entries is None else sorted(config_data(api, "p") or {}) == entries
    )
    for node in ("n1", "n2", "n3"):
        assert labelled(api, node, label) == (None if entries is None else entries[0])
    assert not [key for key in op.requeue if key[1] == "p"]  # nothing about the pool is put off


def test_a_deleted_pools_config_map_stays_until_its_nodes_are_unlabelled(api: Observed, op: Operator) -> None:
    pool_with_nodes(api, op, {"timeSlicing": {"replicas": 4}})
    api.request("DELETE", f"{POOLS}/p")
    sync(op)
    op.mark("GPUPool", "p")  # what the informer's DELETED event does
    op.reconcile_once()
    assert api.dangling == []
    assert config_data(api, "p") is None
    assert labelled(api, "n1", "gpufleet.io/sharing-config") is None


def test_an_old_entry_stays_while_a_node_that_could_not_be_relabelled_picks_it(
    api: Observed, op: Operator, clock: Clock
) -> None:
    pool_with_nodes(api, op, {"timeSlicing": {"replicas": 4}})
    api.refuse = {"n2"}
    api.request(
        "PATCH",
        f"{POOLS}/p",
        body={"spec": {"sharing": {"timeSlicing": {"replicas": 8}}}},
        content_type=MERGE,
    )
    sync(op)
    assert api.dangling == []
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-4", "time-slicing-8"]
    assert labelled(api, "n1", SHARING_LABELS[0]) == "time-slicing-8"
    assert labelled(api, "n2", SHARING_LABELS[0]) == "time-slicing-4"
    # The node and the pool's ConfigMap are looked at again (nothing marks them): once n2 is
    # relabelled, the entry goes.
    later_round(op, clock)
    assert api.dangling == []
    assert labelled(api, "n2", SHARING_LABELS[0]) == "time-slicing-8"
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-8"]


def test_nodes_keep_their_labels_while_the_pools_config_map_cannot_be_written(
    api: Observed, op: Operator, clock: Clock
) -> None:
    pool_with_nodes(api, op, {"timeSlicing": {"replicas": 4}})
    api.refuse_config_maps = True
    api.request(
        "PATCH",
        f"{POOLS}/p",
        body={"spec": {"sharing": {"timeSlicing": {"replicas": 8}}}},
        content_type=MERGE,
    )
    sync(op)
    assert api.dangling == []
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-4"]
    assert labelled(api, "n1", SHARING_LABELS[0]) == "time-slicing-4"
    later_round(op, clock)
    assert api.dangling == []
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-8"]
    assert all(labelled(api, n, SHARING_LABELS[0]) == "time-slicing-8" for n in ("n1", "n2", "n3"))


def test_an_agent_follows_a_pools_replica_change_at_once_never_finding_its_entry_missing(
    api: Observed, op: Operator, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole path: the operator's writes as they come (each node PATCH a round trip long) and the
    agent's watcher with a resync far beyond the test, so only the ConfigMap's watch brings the change."""
    pool_with_nodes(api, op, {"timeSlicing": {"replicas": 4}})
    told: list[tuple[float, NodeSharingConfig | None]] = []
    watcher = SharingConfigWatcher(api, "n2", NS, lambda s: told.append((time.monotonic(), s)), resync=30)
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="gpufleet.kube.agent_config")
    watcher.start(stop)
    try:
        deadline = time.monotonic() + 5
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
        assert told and told[0][1] is not None and told[0][1].device_plugin is not None
        assert told[0][1].device_plugin.key == "time-slicing-4"
        api.node_patch_delay = 0.05
        api.request(
            "PATCH",
            f"{POOLS}/p",
            body={"spec": {"sharing": {"timeSlicing": {"replicas": 8}}}},
            content_type=MERGE,
        )
        sync(op)
        done = time.monotonic()
        while len(told) < 2 and time.monotonic() < done + 5:
            time.sleep(0.01)
        time.sleep(0.3)
    finally:
        stop.set()
    assert [s.device_plugin.key for _, s in told if s is not None and s.device_plugin] == [
        "time-slicing-4",
        "time-slicing-8",
    ]
    assert told[1][0] - done < 2.0
    assert api.dangling == []
    assert not [r for r in caplog.records if "pending" in r.getMessage()]
