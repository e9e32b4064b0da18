"""The node's GPUs as they are now, for the parts of the agent that watch them.

Discovery at start is enough while the MIG layout only changes when the agent restarts (mig-parted
reconfigures a node with the agent stopped). With dynamic MIG the DRA driver creates and destroys
instances at prepare and unprepare, so the exporter and the health checks would report and watch a
layout that no longer exists: the driver calls `refresh` after each change, which discovers again
and hands the new `NodeInfo` to every subscriber.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from gpufleet.agent.nvml import NodeInfo, NvmlBackend

log = logging.getLogger("gpufleet.agent")

NodeListener = Callable[[NodeInfo], None]


class NodeView:
    """The last discovered `NodeInfo`, and who to tell when it changes."""

    def __init__(self, backend: NvmlBackend, node: NodeInfo) -> None:
        self._backend = backend
        self._node = node
        self._listeners: list[NodeListener] = []
        # one refresh at a time: two prepares ending together must not hand out an older discovery last
        self._lock = threading.Lock()

    @property
    def node(self) -> NodeInfo:
        return self._node

    def subscribe(self, listener: NodeListener) -> None:
        self._listeners.append(listener)

    def refresh(self) -> NodeInfo:
        """Discovers the node again and tells the subscribers when anything differs. A discovery that
        fails keeps the last view: the caller (a prepare that already made its instance) must not fail
        for it, and the next change discovers again."""
        with self._lock:
            try:
                node = self._backend.discover()
            except Exception as exc:  # NVML errors of any kind; the agent keeps serving
                log.error("re-discovering the node's GPUs after a MIG change failed: %s", exc)
                return self._node
            if node == self._node:
                return node
            self._node = node
            for listener in self._listeners:
                listener(node)
            log.info(
                "node GPUs re-discovered: %d MIG devices",
                sum(len(gpu.mig_devices) for gpu in node.gpus),
            )
            return node
