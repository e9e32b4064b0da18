"""A pool's sharing change never leaves a node's labels naming an entry its ConfigMap lacks.

The operator writes the pool's ConfigMap and relabels the pool's nodes one by one; a node agent that
reads its Node between two of those writes must find what the labels name. Here every write the
operator makes is followed by a look at all Nodes and ConfigMaps, as an agent could take one then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gpufleet.kube.agent_config import NodeSharingConfig, SharingConfigWatcher
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.operator import Operator
from gpufleet.kube.transport import Json

from .fakeapi import FakeApiServer, _status
from .test_fleet import MERGE, POOLS, get_node, make_pool, sync
from .test_operator import Clock
from .test_scheduler import NODES, add_node

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
        self.watched_from: list[int] = []
        """The resourceVersion of each watch asked for, in order."""

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        with self.lock:
            self.watched_from.append(int(query.get("resourceVersion") or self.head))
        return super().watch(path, query=query, timeout=timeout)

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
    started = time.monotonic()
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
        # Done once the watcher watches again from at least the ConfigMap's last write: it has read
        # what the operator left, and anything it was to tell is told.
        written = int(
            api.get(f"/api/v1/namespaces/{NS}/configmaps/gpufleet-sharing-p")["metadata"]["resourceVersion"]
        )
        deadline = time.monotonic() + 10
        while max(api.watched_from, default=0) < written and time.monotonic() < deadline:
            time.sleep(0.01)
        assert max(api.watched_from, default=0) >= written, "the watcher never read the final ConfigMap"
    finally:
        stop.set()
    assert [s.device_plugin.key for _, s in told if s is not None and s.device_plugin] == [
        "time-slicing-4",
        "time-slicing-8",
    ]
    assert told[1][0] - started < watcher.resync  # through the ConfigMap's watch, not a resync
    assert api.dangling == []
    assert not [r for r in caplog.records if "pending" in r.getMessage()]


# ---------------------------------------------------------------- a deleted pool, the operator restarted
CONFIG_MAPS = f"/api/v1/namespaces/{NS}/configmaps"


def restarted(api: Observed) -> tuple[Operator, Clock]:
    """A new operator process on the same cluster: nothing of the old one's memory (`requeue`)."""
    clock = Clock()
    op = Operator(api, config=KubeConfig(namespace=NS), clock=clock)
    sync(op)  # its start: the informers listed, every node and pool marked, a first round
    return op, clock


def hand_made_config_map(api: FakeApiServer, name: str, data: dict[str, str], *, ours: bool = True) -> None:
    labels = {"app.kubernetes.io/managed-by": "gpufleet"} if ours else {}
    meta = {"name": name, "namespace": NS, "labels": labels}
    api.request(
        "POST", CONFIG_MAPS, body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
    )


def test_a_pool_deleted_mid_handover_loses_its_config_map_after_the_operator_restarts(
    api: Observed, op: Operator
) -> None:
    pool_with_nodes(api, op, TS4)
    api.refuse = {"n2"}  # n2 keeps its labels this round, so the ConfigMap must stay for it
    api.request("DELETE", f"{POOLS}/p")
    sync(op)
    op.mark("GPUPool", "p")
    op.reconcile_once()
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-4"]
    assert labelled(api, "n2", "gpufleet.io/sharing-config") == "gpufleet-sharing-p"
    # The operator stops here; what it put off for the pool is lost with it.
    op2, _ = restarted(api)
    assert labelled(api, "n2", "gpufleet.io/sharing-config") is None
    assert config_data(api, "p") is None
    assert api.dangling == []
    assert not op2.requeue


def test_a_pool_deleted_while_no_operator_ran_loses_its_config_map_once_its_nodes_are_unlabelled(
    api: Observed, op: Operator
) -> None:
    pool_with_nodes(api, op, TS4)
    api.request("DELETE", f"{POOLS}/p")  # nobody sees it: the operator is down
    api.refuse = {"n1"}
    op2, clock2 = restarted(api)
    assert api.dangling == []
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-4"]  # n1 still picks it
    later_round(op2, clock2)
    assert labelled(api, "n1", "gpufleet.io/sharing-config") is None
    assert config_data(api, "p") is None
    assert api.dangling == []


def test_a_gone_pools_config_map_keeps_only_what_nodes_pick_until_none_does(api: Observed) -> None:
    """A node the operator did not label (no record of it applying a pool) still names the ConfigMap: the
    entries no node picks go at once, the picked one stays, and is looked at again until it is unpicked."""
    hand_made_config_map(api, "gpufleet-sharing-old", {"time-slicing-4": "a", "time-slicing-8": "b"})
    add_node(
        api,
        "n9",
        labels={"gpufleet.io/sharing-config": "gpufleet-sharing-old", DEVICE_PLUGIN: "time-slicing-8"},
    )
    op, clock = restarted(api)
    assert config_data(api, "old") == {"time-slicing-8": "b"}
    later_round(op, clock)
    assert config_data(api, "old") == {"time-slicing-8": "b"}
    api.request(
        "PATCH",
        f"{NODES}/n9",
        body={"metadata": {"labels": {"gpufleet.io/sharing-config": None, DEVICE_PLUGIN: None}}},
        content_type=MERGE,
    )
    later_round(op, clock)  # nothing marks the pool: its ConfigMap was put off, not forgotten
    assert config_data(api, "old") is None


def test_the_sweep_leaves_alone_what_is_not_a_gone_pools_config_map(api: Observed, op: Operator) -> None:
    pool_with_nodes(api, op, TS4)
    hand_made_config_map(api, "gpufleet-sharing-theirs", {"x": "y"}, ours=False)
    hand_made_config_map(api, "gpufleet-settings", {"x": "y"})
    # A pool the new operator's informer has not seen yet, its ConfigMap written by the old leader.
    op2 = Operator(api, config=KubeConfig(namespace=NS), clock=Clock())
    for informer in (op2.nodes, op2.pools):
        informer.relist()
    make_pool(api, "new", sharing=TS4)
    hand_made_config_map(api, "gpufleet-sharing-new", {"time-slicing-4": "z"})
    op2.reconcile_once()
    for name in ("p", "new"):
        assert config_data(api, name) is not None
    assert config_data(api, "theirs") == {"x": "y"}
    assert api.objects["/v1/configmaps"].get((NS, "gpufleet-settings")) is not None


def test_the_config_maps_of_gone_pools_are_looked_for_again_at_each_full_list(
    api: Observed, op: Operator, clock: Clock
) -> None:
    pool_with_nodes(api, op, TS4)
    hand_made_config_map(api, "gpufleet-sharing-old", {"time-slicing-4": "a"})
    op.reconcile_once()
    assert config_data(api, "old") is not None  # not listed again: not looked for
    later_round(op, clock)
    assert config_data(api, "old") is None
    assert sorted(config_data(api, "p") or {}) == ["time-slicing-4"]


class NoConfigMapList(Observed):
    """RBAC of an older install: ConfigMaps can be read by name, not listed."""

    def request(self, method: str, path: str, **kw: Any) -> Json:
        if method == "GET" and path == CONFIG_MAPS:
            raise _status(403, "Forbidden", "configmaps is forbidden: cannot list")
        return super().request(method, path, **kw)


def test_an_operator_that_may_not_list_config_maps_says_so_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = NoConfigMapList()
    op = Operator(api, config=KubeConfig(namespace=NS), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="gpufleet.kube.operator"):
        pool_with_nodes(api, op, TS4)
        op.reconcile_once()
    assert labelled(api, "n1", DEVICE_PLUGIN) == "time-slicing-4"
    said = [r.getMessage() for r in caplog.records if "deleted pools" in r.getMessage()]
    assert len(said) == 1 and "cannot list" in said[0]  # once, not every round
