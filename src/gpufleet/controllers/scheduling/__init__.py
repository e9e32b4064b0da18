"""The embedded world's scheduling controller: keeps the scheduler's cache from the store and carries
out its decisions.

Four jobs, one module each, in the shape the Kubernetes world has them (`kube/cache.py`,
`kube/actions.py`, `kube/queues.py`, `kube/scheduler.py`):

- `cachesync`: the cache kept in step with the store (rebuild from a listing, watch events);
- `actions`: decisions carried out (bound Pods created, shrinks, evictions with their restart rule);
- `growth`: elastic workloads restarted larger at a checkpoint;
- `status`: Workload and Queue status, pending reasons and their events;

`state` holds what they share, and `controller` wires them into the controller manager's interface.
The Kubernetes world never imports this package (an import-linter contract).
"""

from gpufleet.controllers.scheduling.controller import SchedulingController
from gpufleet.controllers.scheduling.state import SchedulingStats

__all__ = ["SchedulingController", "SchedulingStats"]
