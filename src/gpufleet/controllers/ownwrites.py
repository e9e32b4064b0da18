"""A controller's own writes, recognised when their events come back (a Kubernetes controller's
expectations of its own writes).

A level-triggered controller is woken by every change of what it watches, its own writes included.
The reconcile that wrote an object decided from the object it wrote, so the event of that write,
with nothing written to the object since (the same resourceVersion), gives it nothing new to look
at. Any other writer's change has another resourceVersion and still wakes it.
"""

from __future__ import annotations

from gpufleet.api.resource import Resource
from gpufleet.controllers.manager import Key


class OwnWrites:
    """Per key, the resourceVersion the controller's last write gave the object, until an event of the
    object comes back."""

    def __init__(self) -> None:
        self.versions: dict[Key, str | None] = {}

    def wrote(self, key: Key, obj: Resource) -> None:
        """`obj` is what the store returned for the controller's write under `key`."""
        self.versions[key] = obj.metadata.resource_version

    def echo(self, key: Key, obj: Resource) -> bool:
        """Whether `obj` (from an event) is the controller's last write under `key` and nothing since.
        The write is forgotten either way: a later event is someone else's."""
        if key not in self.versions:
            return False
        return self.versions.pop(key) == obj.metadata.resource_version

    def clear(self) -> None:
        self.versions.clear()
