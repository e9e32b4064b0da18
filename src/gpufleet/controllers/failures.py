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
import sys

from gpufleet.observability import metrics

log = logging.getLogger(__name__)


def contained(component: str, message: str, *args: object) -> None:
    """Logs the error being handled (call it in an `except` block) as a contained failure of the
    component (a controller's name, `scheduler`, `operator`) and counts it."""
    contained_error(component, sys.exc_info()[1], message, *args)


def contained_error(component: str, error: BaseException | None, message: str, *args: object) -> None:
    """`contained` for an error caught where nothing may log (the scheduling core hands back the
    errors its cycle met, `CycleResult.errors`): logged with that error's traceback, and counted."""
    metrics.CONTAINED_FAILURES.labels(component).inc()
    log.error(f"{component}: {message}", *args, exc_info=error)
