"""Where each kind lives on the API server: group, version, plural, scope, and its URL paths.

gpufleet's own kinds come from the kind registry (`gpufleet.api.registered_kinds`), so a kind added
there is reachable here without change; the built-in kinds the kubernetes world uses are listed
below.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from gpufleet.api.errors import ValidationError


@dataclass(frozen=True, slots=True)
class ResourceType:
    """A REST resource: `/api/v1/...` for the core group, `/apis/{group}/{version}/...` otherwise."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def _prefix(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        """The collection's path; all namespaces when `namespace` is None."""
        if self.namespaced and namespace is not None:
            return f"{self._prefix()}/namespaces/{quote(namespace)}/{self.plural}"
        return f"{self._prefix()}/{self.plural}"

    def item(self, name: str, namespace: str | None = None, subresource: str | None = None) -> str:
        """One object's path (and a subresource of it: `status`, `binding`, `eviction`)."""
        if self.namespaced and not namespace:
            raise ValidationError(f"{self.kind} is namespaced; give a namespace", field="metadata.namespace")
        base = self.collection(namespace if self.namespaced else None)
        path = f"{base}/{quote(name)}"
        return f"{path}/{subresource}" if subresource else path


POD = ResourceType("Pod", "", "v1", "pods", True)
NODE = ResourceType("Node", "", "v1", "nodes", False)
EVENT = ResourceType("Event", "", "v1", "events", True)
SERVICE = ResourceType("Service", "", "v1", "services", True)
NAMESPACE = ResourceType("Namespace", "", "v1", "namespaces", False)
SERVICE_ACCOUNT = ResourceType("ServiceAccount", "", "v1", "serviceaccounts", True)
LEASE = ResourceType("Lease", "coordination.k8s.io", "v1", "leases", True)
JOB = ResourceType("Job", "batch", "v1", "jobs", True)
CRD = ResourceType(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False
)
PRIORITY_CLASS = ResourceType("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False)

BUILTIN = {r.kind: r for r in (POD, NODE, EVENT, SERVICE, NAMESPACE, SERVICE_ACCOUNT, LEASE, JOB, CRD,
                                PRIORITY_CLASS)}  # fmt: skip


def resource_for(kind: str) -> ResourceType:
    """The resource of a built-in kind or of a registered gpufleet kind."""
    builtin = BUILTIN.get(kind)
    if builtin is not None:
        return builtin
    # The registry imports every kind's model: a process that lists only built-in kinds (the
    # scheduler's first lists) does not wait for it.
    from gpufleet.api.kinds import kind_info

    info = kind_info(kind)
    if info is None:
        raise ValidationError(f"kind {kind} is neither built in nor registered", field="kind")
    return ResourceType(info.kind, info.group, info.version, info.plural, info.namespaced)
