"""The health controller: cordons nodes that should take no new pods and evicts what runs on them.

A node with an unhealthy GPU, one that is not Ready, or a spot node under an interruption notice is
cordoned (`spec.unschedulable`, marked as this controller's doing with an annotation, so a cordon a
person set is never lifted here). Its running pods are evicted (failed with the cause), so their gangs
restart elsewhere from their last checkpoint; on a spot notice this happens after the twin's emergency
checkpoint, inside the two-minute warning. When the node is healthy again the cordon is lifted.
"""

from __future__ import annotations

from gpufleet.api import evictions
from gpufleet.api.errors import NotFoundError
from gpufleet.api.labels import CORDONED_BY_ANNOTATION
from gpufleet.api.runtime import Node, Pod
from gpufleet.controllers import events
from gpufleet.controllers.manager import Key, Reconciler
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.store.protocol import Store

ME = "health"


class HealthController(Reconciler):
    name = "health"
    kinds: tuple[str, ...] = ("Node",)
    primary = "Node"

    def __init__(self, store: Store) -> None:
        super().__init__(store)

    def reconcile(self, key: Key, now: float) -> float | None:
        node = self.store.get(Node, key[1])
        problem = _problem(node)
        mine = node.metadata.annotations.get(CORDONED_BY_ANNOTATION) == ME
        if problem is not None:
            reason, message = problem
            if not node.spec.unschedulable:
                annotations = {**node.metadata.annotations, CORDONED_BY_ANNOTATION: ME}
                spec = node.spec.model_copy(update={"unschedulable": True})
                metadata = node.metadata.model_copy(update={"annotations": annotations})
                node = self.store.update(node.model_copy(update={"spec": spec, "metadata": metadata}))
                events.record(self.store, node, reason="Cordoned", message=message, now=now, type="Warning")
            if node.status.phase != "Lost":
                self._evict_pods(node, reason, message, now)
        elif node.spec.unschedulable and mine:
            annotations = {k: v for k, v in node.metadata.annotations.items() if k != CORDONED_BY_ANNOTATION}
            spec = node.spec.model_copy(update={"unschedulable": False})
            metadata = node.metadata.model_copy(update={"annotations": annotations})
            node = self.store.update(node.model_copy(update={"spec": spec, "metadata": metadata}))
            events.record(self.store, node, reason="Uncordoned", message="healthy again", now=now)
        return None

    def _evict_pods(self, node: Node, reason: str, message: str, now: float) -> None:
        for pod in self.store.list(Pod).items:
            if pod.spec.node_name != node.name or pod.terminated:
                continue
            status = pod.status.model_copy(
                update={
                    "phase": "Failed",
                    "ready": False,
                    "reason": reason,
                    "message": f"evicted from {node.name}: {message}",
                    "finish_time": to_datetime(now),
                }
            )
            try:
                self.store.update_status(pod.model_copy(update={"status": status}))
            except NotFoundError:
                continue


def _problem(node: Node) -> tuple[str, str] | None:
    status = node.status
    if status.unhealthy_gpus:
        gpus = ", ".join(
            f"GPU {g.index}" + (f" (XID {g.xid})" if g.xid is not None else "") for g in status.unhealthy_gpus
        )
        return evictions.NODE_UNHEALTHY, f"unhealthy {gpus}"
    if status.interruption_time is not None:
        return evictions.SPOT_INTERRUPTION, f"spot interruption at {status.interruption_time.isoformat()}"
    if status.phase in ("NotReady", "Lost"):
        return evictions.NODE_NOT_READY, f"node is {status.phase}"
    return None
