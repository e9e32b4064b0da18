"""Where the web console reads a world from: one protocol, implemented by the embedded world (here,
over the Store) and by the Kubernetes world (`gpufleet.kube.console`), so the console's view
(`gpufleet.server.console`: who may see what, and `view`: the rows) is written once for both. It lives
beside the Store protocol since both worlds import it and neither may import the other or the server.

- `resources(kind)`: gpufleet's own kinds that teams submit and read (Queue, TrainingJob,
  InferenceService) as models, so a queue's token is filtered by the API's own rule
  (`access.may_read`). Both worlds store them as such: the SQLite store, or the custom resources
  `KubeStore` reads.
- `fleet()`: what only the admin sees, in the embedded API's JSON form (as `GET /v1/nodes` answers):
  Nodes (`spec.gpus`, `spec.pool`, `spec.pricePerGPUHour`, `spec.sharing`, `spec.unschedulable`,
  the `rack` label; `status.phase`, `status.unhealthyGpus`), Pods (`spec.nodeName`, `spec.gpus`,
  `spec.gpuMilli`, `spec.mig`, `spec.workload`, `spec.owner`, and `spec.queue`: the queue whose
  quota they hold), GPUPools, and loose work: what runs outside gpufleet's kinds (in Kubernetes, a
  plain Pod or a Job's pods with their pending reason), shown as work rows. The Kubernetes world
  translates its Nodes and Pods into this form (`gpufleet.kube.console`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufleet.api.kinds import kind_info
from gpufleet.api.resource import Resource
from gpufleet.store.protocol import Store

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Fleet:
    """The admin's part of the view, each object in the embedded API's JSON form."""

    nodes: list[Json] = field(default_factory=list)
    pods: list[Json] = field(default_factory=list)
    pools: list[Json] = field(default_factory=list)
    loose_work: list[Json] = field(default_factory=list)


class ConsoleSource(Protocol):
    """A world as the console reads it (see the module's docstring)."""

    def resources(self, kind: str) -> Sequence[Resource]:
        """Every object of one of gpufleet's kinds (Queue, TrainingJob, InferenceService)."""
        ...

    def fleet(self) -> Fleet:
        """Nodes, pods, pools and loose work, for the map and the costs."""
        ...


class StoreSource:
    """The embedded world: everything is an object of the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def resources(self, kind: str) -> Sequence[Resource]:
        return list(self._store.list(kind).items) if kind_info(kind) is not None else []

    def fleet(self) -> Fleet:
        # A pod's queue is its Workload's: the embedded pods name their workload, not their queue.
        queue_of = {
            (w.namespace or "", w.name): str(w.to_dict()["spec"].get("queue") or "default")
            for w in self.resources("Workload")
        }
        pods = []
        for pod in self.resources("Pod"):
            data = pod.to_dict()
            spec = data.setdefault("spec", {})
            spec["queue"] = queue_of.get((pod.namespace or "", str(spec.get("workload"))))
            pods.append(data)
        return Fleet(
            nodes=[n.to_dict() for n in self.resources("Node")],
            pods=pods,
            pools=[p.to_dict() for p in self.resources("GPUPool")],
        )
