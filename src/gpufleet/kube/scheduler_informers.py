"""The scheduler's two large informers, Nodes and Pods: made (and started) before the rest of the
scheduler is imported.

At a few thousand nodes the API server takes a good part of a second to answer the first lists, and
the scheduling core, the placement policies and the API's models take as long to import. Starting
these lists first lets the two overlap: `gpufleet kube scheduler` asks for them as soon as it has a
connection, and `KubeScheduler` finds them already made (one informer per resource in `Informers`).
This module imports nothing but the informer, so asking costs no more than the client itself.
"""

from __future__ import annotations

from typing import NamedTuple

from gpufleet.kube.informer import Informer, Informers
from gpufleet.kube.resources import NODE, POD

POD_PAGE = 500
"""Pods per page of the first list: scheduling starts with the first page."""
BOUND = "spec.nodeName!="
"""The pods listed whole before the first page: the bound ones, which hold capacity. The pages after
the first are held until the scheduler's first pass is over (`Informer.hold_pages`): its first binds
do not wait for the process to decode the rest of a large backlog."""


class SchedulerInformers(NamedTuple):
    nodes: Informer
    pods: Informer


def scheduler_informers(informers: Informers) -> SchedulerInformers:
    """The Node and Pod informers the scheduler reads, made in `informers` if they are not yet."""
    return SchedulerInformers(
        nodes=informers.informer(NODE),
        pods=informers.informer(POD, page_size=POD_PAGE, known_first=BOUND, hold_pages=True),
    )
