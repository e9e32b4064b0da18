"""What the scheduler does to the cluster: bind, evict, and say why (pod conditions and Events).

- Bind: one Binding per pod, carrying the pod's GPU choice as an annotation (so a restarted scheduler
  rebuilds exactly the same allocations), then a Normal `Scheduled` Event. A 409 for a pod already
  bound to the same node means an earlier attempt got through: success.
- Evict: the Eviction API is asked, so PodDisruptionBudgets apply (429: a budget forbids it for now),
  then the reason goes into the victim's status (the `DisruptionTarget` condition, as kube-scheduler
  writes it); written first, it would be replaced by the Eviction API's own. Pods are given their
  grace period to stop.
- Pending: the `PodScheduled=False, Unschedulable` condition carries the reason, and an Event
  repeats it; both only when the reason changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.api.errors import GpuFleetError
from gpufleet.fleet.state import Allocation
from gpufleet.kube.config import GPUS_ANNOTATION
from gpufleet.kube.resources import EVENT, POD, resource_for
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

log = logging.getLogger(__name__)

COMPONENT = "gpufleet-scheduler"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def allocation_annotation(alloc: Allocation) -> str:
    """The GPUs a pod holds, as JSON: `{"gpus": [0, 1], "milli": 1000}` or `{"mig": {...}}`."""
    if alloc.mig is not None:
        return json.dumps(
            {"mig": {"gpu": alloc.mig.gpu, "profile": alloc.mig.profile, "start": alloc.mig.start}}
        )
    return json.dumps({"gpus": list(alloc.gpus), "milli": alloc.milli}, separators=(",", ":"))


def parse_allocation_annotation(pod: Json) -> dict[str, Any] | None:
    raw = (pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION)
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _ref(pod: Json) -> tuple[str, str]:
    meta = pod["metadata"]
    return meta.get("namespace") or "default", meta["name"]


@dataclass(slots=True)
class Actions:
    """Binds, evicts and explains through one transport; remembers what it already said."""

    api: Transport
    identity: str = COMPONENT
    grace_seconds: int | None = 30
    component: str = COMPONENT
    """Who writes the Events (`source.component`, `reportingComponent`): the operator names itself."""
    said: dict[tuple[str, str], str] = field(default_factory=dict)

    # ------------------------------------------------------------------ bind
    def bind(
        self,
        pod: Json,
        node: str,
        alloc: Allocation | None = None,
        *,
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        """Binds a pod to a node in one request; False if the pod is gone or bound elsewhere.

        The GPUs chosen (and any other `annotations`) ride on the Binding: the API server merges a
        Binding's annotations into the pod in the same write that sets its node, so a restarted
        scheduler finds exactly the allocation that was bound, and no second request is needed.
        """
        ns, name = _ref(pod)
        noted = dict(annotations or {})
        if alloc is not None:
            noted[GPUS_ANNOTATION] = allocation_annotation(alloc)
        meta: Json = {"name": name, "namespace": ns, "uid": pod["metadata"].get("uid")}
        if noted:
            meta["annotations"] = noted
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.api.request("POST", POD.item(name, ns, "binding"), body=binding)
        except ApiError as exc:
            if exc.status == 409:
                return self._bound_to(ns, name, node)
            if exc.status == 404:
                return False
            raise
        self.said.pop((ns, name), None)
        return True

    def scheduled(self, pod: Json, node: str) -> None:
        """The Normal `Scheduled` Event kube-scheduler writes for every pod it binds."""
        ns, name = _ref(pod)
        self.event(pod, reason="Scheduled", message=f"Successfully assigned {ns}/{name} to {node}")

    def _bound_to(self, ns: str, name: str, node: str) -> bool:
        try:
            current = self.api.request("GET", POD.item(name, ns))
        except ApiError:
            return False
        return bool(current.get("spec", {}).get("nodeName") == node)

    # ------------------------------------------------------------------ evict
    def evict(self, pod: Json, *, reason: str, message: str, event_reason: str = "Preempted") -> bool:
        """Asks the Eviction API, then marks the pod a disruption target; False while a budget forbids.

        The condition is written after the eviction: the Eviction API sets its own `DisruptionTarget`
        (reason `EvictionByEvictionAPI`) over any the pod had, and the reason users need is ours.
        """
        ns, name = _ref(pod)
        options: Json = {}
        if self.grace_seconds is not None:
            options["gracePeriodSeconds"] = self.grace_seconds
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
            "deleteOptions": options,
        }
        try:
            self.api.request("POST", POD.item(name, ns, "eviction"), body=eviction)
        except ApiError as exc:
            if exc.status == 404:
                return True
            if exc.status == 429:
                where = {"namespace": ns, "node": (pod.get("spec") or {}).get("nodeName") or ""}
                log.info("eviction of %s/%s refused for now: %s", ns, name, exc.message, extra=where)
                return False
            raise
        self.set_condition(pod, "DisruptionTarget", "True", reason, message)
        self.event(pod, reason=event_reason, message=message, type="Warning")
        return True

    # ---------------------------------------------------------------- explain
    def pending(self, pod: Json, *, reason_type: str, message: str) -> None:
        """Says why a pod waits: its PodScheduled condition and an Event, when the reason changed."""
        ns, name = _ref(pod)
        text = f"{reason_type}: {message}"
        if self.said.get((ns, name)) == text:
            return
        self.set_condition(pod, "PodScheduled", "False", "Unschedulable", text)
        self.event(pod, reason="FailedScheduling", message=text, type="Warning")
        self.said[(ns, name)] = text

    def set_condition(self, pod: Json, kind: str, status: str, reason: str, message: str) -> None:
        """Sets one condition in the pod's status, leaving the others (and stale reads) alone."""
        ns, name = _ref(pod)
        for _ in range(3):
            try:
                current = self.api.request("GET", POD.item(name, ns))
            except ApiError:
                return
            conditions = [
                c for c in current.get("status", {}).get("conditions") or [] if c.get("type") != kind
            ]
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": _now(),
                }
            )
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {"conditions": conditions},
            }
            try:
                self.api.request("PATCH", POD.item(name, ns, "status"), body=patch, content_type=MERGE_PATCH)
                return
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("condition %s of %s/%s not written: %s", kind, ns, name, exc)
                    return

    def event(self, obj: Json, *, reason: str, message: str, type: str = "Normal") -> None:
        """A core/v1 Event about an object (best effort: an Event lost is not an error)."""
        meta = obj["metadata"]
        # Events about cluster-scoped objects (Nodes, Queues) live in `default` and name no namespace
        # in involvedObject, which is where `kubectl describe` looks for them.
        ns = meta.get("namespace") or "default"
        involved = {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", "Pod"),
            "name": meta["name"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        if meta.get("namespace"):
            involved["namespace"] = meta["namespace"]
        stamp = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.api.request("POST", EVENT.collection(ns), body=event)
        except ApiError as exc:
            log.debug("event %s on %s/%s not written: %s", reason, ns, meta["name"], exc)

    def owner_status(self, owner: Mapping[str, Any], namespace: str, status: Json) -> None:
        """Merges `status` into a gpufleet custom resource's status (a TrainingJob's pendingReason)."""
        group, _, version = str(owner.get("apiVersion", "")).partition("/")
        try:
            res = resource_for(str(owner.get("kind")))
        except GpuFleetError:
            return  # not a gpufleet kind
        if res.group != group or res.version != version:
            return
        path = res.item(str(owner["name"]), namespace, "status")
        try:
            self.api.request("PATCH", path, body={"status": status}, content_type=MERGE_PATCH)
        except ApiError as exc:
            log.debug("status of %s %s/%s not written: %s", res.kind, namespace, owner.get("name"), exc)
