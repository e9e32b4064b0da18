"""What the node agent reads from the cluster for its GPU sharing: its Node's labels and its pool's ConfigMap.

NVIDIA's GPU Operator runs a config-manager beside the device plugin: it follows the node label
`nvidia.com/device-plugin.config`, picks that entry of the plugin's ConfigMap and restarts the plugin
with it. gpufleet's agent does the same from the labels the operator puts on a pool's nodes
(`kube.fleet`): `gpufleet.io/sharing-config` names the ConfigMap (in the operator's namespace,
`kube.sharing` writes it), `nvidia.com/device-plugin.config` the device-plugin entry in it and
`nvidia.com/mig.config` the mig-parted entry.

This module only reads and watches; what the entries mean is the agent's business
(`gpufleet.agent.config`), and the CLI joins the two, since the agent may not use the client. It needs
`get` on the Node, `list`/`watch` on ConfigMaps of one namespace and `create` on Events in `default`
(the API server keeps Events about cluster-scoped objects such as Nodes there, as kubelet's are):

- the ConfigMap is watched (by name), so a change of it is seen at once;
- the Node is read again at every change of the ConfigMap and every `resync` seconds, since watching
  it would take `list`/`watch` on every Node of the cluster; a label change is seen within `resync`.

An entry whose ConfigMap or key is missing is pending, not wrong: the operator relabels a pool's
nodes one by one around its writes of the ConfigMap (and a cluster's garbage collector may delete the
ConfigMap of a deleted pool before the operator takes the labels off), so the Node read a moment ago
may still name what is gone or not name what is new. The device-plugin entry and the mig-parted entry
are pending each on its own: a label gpufleet did not set (the GPU Operator may put
`nvidia.com/mig.config=all-disabled` on every GPU node) names a key the pool's ConfigMap never has,
and must not hold back the entry that is there. A selection is passed on when something in it can
be applied (the agent applies what is there and leaves what is missing as it is); one in which
nothing can (`wholly_pending`) is not. Either way what is missing is logged, and the Node is read
again soon (`PENDING_RETRY_SECONDS`, doubling up to `resync`) instead of at the next resync. An
entry still missing after `resync` is likely a mistake rather than the operator's relabelling: it is
logged as a warning and reported once as a Warning Event on the Node (`SharingConfigMissing`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpufleet.kube.config import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL, SHARING_CONFIG_LABEL
from gpufleet.kube.informer import Backoff
from gpufleet.kube.resources import EVENT, NODE
from gpufleet.kube.sharing import CONFIG_MAP
from gpufleet.kube.transport import ApiError, Json, Transport

log = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
PENDING_RETRY_SECONDS = 1.0
"""The first wait (jittered down to half) before the Node is read again while its selection is pending."""
COMPONENT = "gpufleet-agent"
NODE_EVENTS_NAMESPACE = "default"
"""Where an Event about a Node must be: the API server refuses one elsewhere (`involvedObject.namespace`)."""


@dataclass(frozen=True, slots=True)
class NamedConfig:
    """One entry of the sharing ConfigMap, picked by a node label."""

    config_map: str
    """`namespace/name` of the ConfigMap."""
    key: str
    text: str | None
    """The entry's YAML; None when the ConfigMap or this key is missing (`missing` says which)."""
    missing: str | None = field(default=None, compare=False)
    """Why it is missing; not compared: it lists the keys the ConfigMap has, and a change of those
    does not change what is applied."""

    @property
    def where(self) -> str:
        """How errors name the entry: `ConfigMap gpufleet-system/gpufleet-sharing-ts, key time-slicing-4`."""
        return f"ConfigMap {self.config_map}, key {self.key}"


@dataclass(frozen=True, slots=True)
class NodeSharingConfig:
    """What the Node's labels select: the device-plugin entry and the mig-parted entry (either may be
    absent when the pool shares its GPUs only one way)."""

    config_map: str
    device_plugin: NamedConfig | None
    mig: NamedConfig | None

    @property
    def missing(self) -> list[str]:
        """What the labels name that does not exist (the ConfigMap, a key): empty when nothing is
        missing; otherwise those entries are pending, not applicable yet."""
        return [e.missing or e.where for e in self.missing_entries]

    @property
    def missing_entries(self) -> list[NamedConfig]:
        return [e for e in (self.device_plugin, self.mig) if e is not None and e.text is None]

    @property
    def wholly_pending(self) -> bool:
        """Whether nothing in it can be applied yet: the device-plugin entry is missing, and so is the
        mig-parted one if one is named. (No device-plugin label at all is something to apply: the
        local config.)"""
        plugin, mig = self.device_plugin, self.mig
        return plugin is not None and plugin.text is None and (mig is None or mig.text is None)


def selected(node: Json, namespace: str, config_map: Json | None) -> NodeSharingConfig | None:
    """The entries a Node's labels pick from `config_map` (the ConfigMap they name, or None when it
    does not exist); None when the Node names no sharing ConfigMap."""
    labels: Mapping[str, str] = node.get("metadata", {}).get("labels") or {}
    name = labels.get(SHARING_CONFIG_LABEL)
    if not name:
        return None
    where = f"{namespace}/{name}"
    data: Mapping[str, str] = (config_map or {}).get("data") or {}

    def entry(label: str) -> NamedConfig | None:
        key = labels.get(label)
        if not key:
            return None
        if config_map is None:
            missing = f"ConfigMap {where} (named by {SHARING_CONFIG_LABEL}) not found"
            missing += f", nor its key {key!r} (named by {label})"
            return NamedConfig(where, key, None, missing)
        if key not in data:
            known = ", ".join(sorted(data)) or "none"
            missing = f"ConfigMap {where} has no key {key!r} (named by {label}); it has {known}"
            return NamedConfig(where, key, None, missing)
        return NamedConfig(where, key, data[key])

    return NodeSharingConfig(where, entry(DEVICE_PLUGIN_CONFIG_LABEL), entry(MIG_CONFIG_LABEL))


OnChange = Callable[[NodeSharingConfig | None], None]


class SharingConfigWatcher:
    """Follows one Node's sharing labels and the ConfigMap they name; calls `on_change` with what they
    select at the start and whenever that changes (None: the Node names no sharing ConfigMap)."""

    def __init__(
        self,
        api: Transport,
        node_name: str,
        namespace: str,
        on_change: OnChange,
        *,
        resync: float = RESYNC_SECONDS,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.namespace = namespace
        self.on_change = on_change
        self.resync = resync
        self._backoff = backoff or Backoff()
        self._pending_backoff = Backoff(
            initial=PENDING_RETRY_SECONDS, maximum=max(resync, PENDING_RETRY_SECONDS)
        )
        self._node: Json = {}
        self._last: NodeSharingConfig | None = None
        self._told = False
        self._pending: dict[tuple[str, str], float | None] = {}
        """(ConfigMap, key) missing -> since when (monotonic); None once a warning and an Event said it
        lasts (again after it was found, or no longer named, and went missing anew)."""
        self._why: dict[tuple[str, str], str] = {}
        """(ConfigMap, key) missing -> what was last logged about it (the ConfigMap gone, the key)."""
        self._thread: threading.Thread | None = None
        self._clock = clock
        """Times how long an entry has been missing (monotonic seconds)."""
        self.polls = 0
        """Reads completed: whoever waits for the watcher to have looked again (a test, after a change
        that must not be told) waits for this to grow instead of for a guessed time."""

    @property
    def pending(self) -> bool:
        """Whether the last read found the labels naming a ConfigMap or key that does not exist (then the
        Node is read again sooner than `resync`)."""
        return bool(self._pending)

    def read(self) -> tuple[NodeSharingConfig | None, str | None]:
        """Reads the Node and the ConfigMap it names once: what they select, and the ConfigMaps'
        resourceVersion to watch from (None when the Node names no ConfigMap)."""
        node = self.api.request("GET", NODE.item(self.node_name))
        self._node = node
        name = (node.get("metadata", {}).get("labels") or {}).get(SHARING_CONFIG_LABEL)
        if not name:
            return None, None
        # A list by name rather than a GET: it answers for a missing ConfigMap too, with the version
        # to watch from for its creation.
        found = self.api.request(
            "GET", CONFIG_MAP.collection(self.namespace), query={"fieldSelector": f"metadata.name={name}"}
        )
        items = [item for item in found.get("items", []) if item.get("metadata", {}).get("name") == name]
        version = str(found.get("metadata", {}).get("resourceVersion") or "") or None
        return selected(node, self.namespace, items[0] if items else None), version

    def poll(self) -> tuple[str | None, str | None]:
        """One read; tells `on_change` when the selection differs from the last one told. Returns the
        ConfigMap's name and the resourceVersion to watch it from (None, None: no ConfigMap named)."""
        selection, version = self.read()
        missing = selection.missing_entries if selection is not None else []
        held = selection is not None and selection.wholly_pending
        self._note(missing, held)
        if not held and (not self._told or selection != self._last):
            try:
                self.on_change(selection)
            except Exception:  # the watcher outlives a failure to apply; the next read tries again
                log.exception("applying the sharing config of node %s failed", self.node_name)
            else:
                self._last, self._told = selection, True
        if not missing:
            self._pending_backoff.reset()
        self.polls += 1
        if selection is None:
            return None, None
        return selection.config_map.split("/", 1)[1], version

    def _note(self, missing: list[NamedConfig], held: bool) -> None:
        """Entries the labels name that are missing (`held`: all of them): logged when first seen, and
        once one has lasted `resync` (then it is likely not the operator's relabelling but a mistake,
        such as a label gpufleet did not set), a warning and a Warning Event on the Node, once while it
        lasts."""
        then = "the config in force stays" if held else "the rest is applied without it"
        now = self._clock()
        entries = {(e.config_map, e.key): e for e in missing}
        self._pending = {at: self._pending.get(at, now) for at in entries}
        why = {at: entry.missing or entry.where for at, entry in entries.items()}
        for at, since in self._pending.items():
            what = why[at]
            if self._why.get(at) != what:
                log.info("node %s sharing config pending: %s; %s", self.node_name, what, then)
            if since is not None and now - since >= self.resync:
                message = f"{what}; still missing after {now - since:.0f}s, {then}"
                log.warning("node %s sharing config: %s", self.node_name, message)
                self.report("SharingConfigMissing", message, warning=True)
                self._pending[at] = None
        self._why = why

    def run(self, stop: threading.Event) -> None:
        """Polls, then waits for a change of the ConfigMap (or `resync`, or a short while when the
        selection is pending), until `stop` is set."""
        while not stop.is_set():
            try:
                name, version = self.poll()
                self._backoff.reset()
                self._wait(
                    stop, name, version, self._pending_backoff.delay() if self.pending else self.resync
                )
            except Exception as exc:  # the API server away, a watch cut: try again after a pause
                delay = self._backoff.delay()
                log.warning("node %s sharing config: %s; retrying in %.1fs", self.node_name, exc, delay)
                stop.wait(delay)

    def start(self, stop: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(
            target=self.run, args=(stop,), daemon=True, name="gpufleet-sharing-config"
        )
        self._thread.start()
        return self._thread

    def _wait(self, stop: threading.Event, name: str | None, version: str | None, seconds: float) -> None:
        """Up to `seconds`, or until the ConfigMap `name` changes (`stop` is checked between events)."""
        if name is None or version is None:
            stop.wait(seconds)
            return
        query: dict[str, str | int | bool] = {
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": max(1, round(seconds)),
        }
        lines = self.api.watch(CONFIG_MAP.collection(self.namespace), query=query, timeout=seconds + 10)
        try:
            for line in lines:
                obj = line.get("object") or {}
                if line.get("type") != "BOOKMARK" and obj.get("metadata", {}).get("name") == name:
                    return  # it changed: read it (and the Node) again
                if stop.is_set():
                    return
        except ApiError as exc:
            if exc.status != 410:  # 410: the version is too old; the next read starts afresh
                raise

    def report(self, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event about the Node (best effort), which `kubectl describe node` shows."""
        meta = self._node.get("metadata") or {}
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.node_name}.", "namespace": NODE_EVENTS_NAMESPACE},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT, "host": self.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.api.request("POST", EVENT.collection(NODE_EVENTS_NAMESPACE), body=event)
        except ApiError as exc:
            log.debug("event %s on node %s not written: %s", reason, self.node_name, exc)
