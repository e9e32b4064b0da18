"""Failures the control plane contains: an error no user caused (a bug, or a value no check foresaw).

Met on one object, such an error must not stop the others: the controller manager logs a reconcile or
a controller's step that raised and goes on (`controllers.manager`), the schedulers leave a workload
or node they fail on out of scheduling until that object changes (`controllers.scheduling`,
`kube.cache`), and the Kubernetes operator tries a failed reconcile again later (`kube.operator`).
Each is logged here, on one logger, with its traceback, and counted in
`gpufleet_contained_failures_total` (the `GpufleetContainedFailure` alert), so that an operator, the
simulator's check and the test suite's watch (`tests/conftest.py`) see every one of them.
"""

from __future__ import annotations

import logging

from gpufleet.observability import metrics

log = logging.getLogger(__name__)


def contained(component: str, message: str, *args: object) -> None:
    """Logs the error being handled (call it in an `except` block) as a contained failure of the
    component (a controller's name, `scheduler`, `operator`) and counts it."""
    metrics.CONTAINED_FAILURES.labels(component).inc()
    log.exception(f"{component}: {message}", *args)
