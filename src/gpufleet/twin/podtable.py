"""The twin's pods by (namespace, name), with each training job's pods indexed.

Whenever one of a job's pods changes, the twin looks at all of that job's pods to start, re-pace or
stop its run. It used to walk every pod of the fleet for that, so each pod change cost as much as
the fleet held pods (hundreds at once in a trace replay, four changes per pod). The table keeps, per
(namespace, job label), the job's pod keys in the order the table holds them, so that the job's
pods come out as the walk gave them: a key set again keeps its place, a key deleted and set again
goes last, in both.
"""

from __future__ import annotations

from gpufleet.api.labels import JOB_LABEL
from gpufleet.api.runtime import Pod

PodKey = tuple[str, str]


class PodTable(dict[PodKey, Pod]):
    """A dict of pods whose `of_job` answers without a walk. Only item assignment, `del` and reads
    are used on it (`pop`, `update`, `clear` would bypass the index and are refused)."""

    def __init__(self) -> None:
        super().__init__()
        self._by_job: dict[PodKey, dict[PodKey, None]] = {}

    def __setitem__(self, key: PodKey, pod: Pod) -> None:
        old = super().get(key)
        job = pod.metadata.labels.get(JOB_LABEL)
        super().__setitem__(key, pod)
        if old is None:  # new: last in the table, last among its job's
            if job is not None:
                self._by_job.setdefault((key[0], job), {})[key] = None
            return
        old_job = old.metadata.labels.get(JOB_LABEL)
        if old_job != job:
            # Relabelled (the twin never does it): the key keeps its place in the table, so the
            # new job's keys are read again in the table's order.
            self._unindex(key, old_job)
            if job is not None:
                self._reindex(key[0], job)

    def __delitem__(self, key: PodKey) -> None:
        old = self[key]
        super().__delitem__(key)
        self._unindex(key, old.metadata.labels.get(JOB_LABEL))

    def _unindex(self, key: PodKey, job: str | None) -> None:
        if job is None:
            return
        keys = self._by_job.get((key[0], job))
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self._by_job[(key[0], job)]

    def _reindex(self, namespace: str, job: str) -> None:
        keys = {
            k: None for k, p in self.items() if k[0] == namespace and p.metadata.labels.get(JOB_LABEL) == job
        }
        self._by_job[(namespace, job)] = keys

    def of_job(self, namespace: str, job: str) -> list[Pod]:
        """The pods in `namespace` labelled as `job`'s, in the table's order."""
        return [self[key] for key in self._by_job.get((namespace, job), ())]

    def pop(self, *args: object) -> Pod:
        raise TypeError("PodTable: delete with `del`, which keeps the job index")

    def update(self, *args: object, **kwargs: object) -> None:
        raise TypeError("PodTable: set items one by one, which keeps the job index")

    def clear(self) -> None:
        raise TypeError("PodTable: delete with `del`, which keeps the job index")
