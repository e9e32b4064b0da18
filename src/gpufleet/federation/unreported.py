"""What a worker's report does not count yet: work the manager dispatched there since the report, or
work that reached the worker but is not placed there yet.

The manager rebuilds its view each pass from the Clusters' last reports. A report is a count taken at
one moment, so work dispatched after it, or not yet placed when it was taken, is not in its figures;
left in, the next pass would dispatch onto GPUs that work is about to take (a slow or lossy link, or a
worker that places work a while after it arrives, over-fills one cluster). Each dispatch carries a
number that only grows (`next_sequence`); a report names the newest it holds and the ones it holds but
does not count (`Counted`); the manager takes out of the summary exactly the work it holds there that
the report does not count (`take_out`), and nothing the report counts already.

Pure: no I/O, no clock (the time that seeds a sequence is an argument).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.api.numerals import plain_digits
from gpufleet.federation.summary import ClusterSummary, ModelSummary
from gpufleet.federation.take import GangShape, spread, take

SEQUENCE = "gpufleet.io/dispatch-sequence"
"""On both copies of dispatched work (the manager's object and the worker's): the dispatch's number."""
MICROSECONDS = 1_000_000


def sequence_of(annotations: Mapping[str, str]) -> int | None:
    """The number of the dispatch an object's annotations name; None for work dispatched before
    dispatches were numbered, or a value that is not a number."""
    value = annotations.get(SEQUENCE, "")
    return int(value) if plain_digits(value) else None


def next_sequence(last: int, now: float) -> int:
    """The next dispatch's number: after `last`, and at least `now` in microseconds, so a manager
    restarted (or a new leader) numbers after every dispatch of the one before without a stored
    counter."""
    return max(last + 1, int(now * MICROSECONDS))


@dataclass(frozen=True, slots=True)
class Counted:
    """What a report says of the manager's dispatches: `newest` the newest it holds (0: none; None: the
    report names none, as a worker of an older release reports) and `uncounted` those it holds but
    whose GPUs its figures do not count (not placed yet)."""

    newest: int | None
    uncounted: frozenset[int] = frozenset()

    def counts(self, sequence: int | None) -> bool:
        """Whether the report's figures count the dispatch numbered `sequence`. Work dispatched before
        dispatches were numbered (None) is taken as counted, as it always was."""
        if sequence is None or self.newest is None:
            return True
        return sequence <= self.newest and sequence not in self.uncounted


ALL_COUNTED = Counted(newest=None)
"""A report that names no dispatches (a worker of an older release): its figures are taken as they are,
as before dispatches were numbered."""


def take_out(cluster: ClusterSummary, model: str | None, gang: GangShape) -> None:
    """Takes `gang` out of `cluster`'s summary of `model`, as the dispatcher took it when it sent the
    work. When the summary no longer has room for it (the worker's figures moved on), what is there is
    taken anyway, from the fullest domains first: the gang will take it when the worker places it."""
    if model is None or model not in cluster.models:
        return  # CPU-only work, or a model the worker no longer reports: nothing of it to take
    summary = cluster.models[model]
    after = take(summary, gang, cluster.levels)
    cluster.models[model] = after if isinstance(after, ModelSummary) else _take_what_is_there(summary, gang)


def _take_what_is_there(summary: ModelSummary, gang: GangShape) -> ModelSummary:
    after = summary.copy()
    whole = min(gang.whole_gpus, after.free_gpus)
    after.free_gpus -= whole
    after.free_share_milli = max(0, after.free_share_milli - sum(gang.share))
    for profile in gang.mig:
        if after.free_mig.get(profile, 0) > 0:
            after.free_mig[profile] -= 1
    for histogram in after.free_domains.values():
        spread(histogram, whole)
    if after.host_labels is not None:
        after.host_labels.spread(whole)
    return after


def take_out_all(
    clusters: dict[str, ClusterSummary],
    reports: dict[str, Counted],
    held: Iterable[tuple[str, int | None, str | None, GangShape]],
) -> list[tuple[str, int | None]]:
    """Takes out of each cluster's summary the held work (cluster, sequence, model, gang) its report
    does not count; returns which (cluster, sequence) were taken out."""
    taken = []
    for cluster, sequence, model, gang in held:
        report = reports.get(cluster, ALL_COUNTED)
        summary = clusters.get(cluster)
        if summary is None or report.counts(sequence):
            continue
        take_out(summary, model, gang)
        taken.append((cluster, sequence))
    return taken
