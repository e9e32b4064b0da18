"""kube-state-metrics' node series for the embedded world's nodes, on `gpufleet up`'s `/metrics`.

The alert rules are written once for both worlds. `GpuNodeNotReady` reads kube-state-metrics'
`kube_node_status_condition` and `kube_node_status_capacity`, which a Kubernetes cluster has and the
embedded world had not: there the store is the API server, so `gpufleet up` exports the same two series,
with kube-state-metrics' names, labels and values, for the nodes it holds. The Kubernetes scheduler and
operator do not (kube-state-metrics does, and a second copy would fire every alert twice).

- `kube_node_status_condition{node, condition, status}`: one series per status value (`true`,
  `false`, `unknown`) of each condition the node reports, 1 for the one it has and 0 for the others.
- `kube_node_status_capacity{node, resource, unit}`: `nvidia_com_gpu` (integer), `cpu` (core) and
  `memory` (byte), for what the node has.

Read from the store at each scrape, so a deleted node's series go with it.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.api.kinds import kind_info
from gpufleet.store.protocol import Store

_STATUSES = ("true", "false", "unknown")
_MIB = 1024 * 1024


class NodeStateCollector(Collector):
    """Yields kube-state-metrics' node condition and capacity series for the store's nodes."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        condition = GaugeMetricFamily(
            "kube_node_status_condition",
            "The condition of a cluster node.",
            labels=["node", "condition", "status"],
        )
        capacity = GaugeMetricFamily(
            "kube_node_status_capacity",
            "The capacity for different resources of a node.",
            labels=["node", "resource", "unit"],
        )
        nodes = self._store.list("Node").items if kind_info("Node") is not None else []
        for node in nodes:
            data = node.to_dict()
            name = data["metadata"]["name"]
            spec, status = data.get("spec") or {}, data.get("status") or {}
            for cond in status.get("conditions") or []:
                have = str(cond.get("status", "Unknown")).lower()
                for value in _STATUSES:
                    condition.add_metric([name, cond["type"], value], 1.0 if value == have else 0.0)
            resources = (
                ("nvidia_com_gpu", "integer", spec.get("gpus", 0)),
                ("cpu", "core", spec.get("cpuMilli", 0) / 1000),
                ("memory", "byte", spec.get("memoryMib", 0) * _MIB),
            )
            for resource, unit, amount in resources:
                if amount:
                    capacity.add_metric([name, resource, unit], float(amount))
        yield condition
        yield capacity
