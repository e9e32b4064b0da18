"""One slow or failing worker does not slow the manager's pass for the others (`federation.reach`).

The manager is the real `FederationController` over in-memory stores; one worker's link is a double
that hangs or fails, the other answers at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from pydantic import SecretStr

from gpufleet.api import Cluster, load_objects
from gpufleet.api.cluster import DispatchCount
from gpufleet.api.errors import NotFoundError
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret, SecretSpec
from gpufleet.api.training import TrainingJob
from gpufleet.cli.client import ServerUnreachableError
from gpufleet.cli.fedtwin import Link, StoreWorker
from gpufleet.controllers.timeutil import to_datetime
from gpufleet.federation.link import CLUSTER
from gpufleet.federation.manager import worker_status
from gpufleet.federation.mirror import FederationController
from gpufleet.federation.reach import WorkerReach
from gpufleet.store.memory import MemoryStore

from .twoworkers import MANAGER, START, hosts, job


class Troubled(StoreWorker):
    """A worker's link that, while `mode` says so, hangs for `hang_seconds` on every call
    ("hang") or fails at once ("fail"), as a worker that drops packets does; it counts the calls."""

    def __init__(self, store: MemoryStore, name: str) -> None:
        super().__init__(store, Link(name))
        self.mode = "ok"
        self.hang_seconds = 1.0
        self.calls: Counter[str] = Counter()
        self.released = threading.Event()

    def __getattribute__(self, name: str) -> object:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr) or name not in _CALLS:
            return attr

        def call(*args: object) -> object:
            self.calls[name] += 1
            if self.mode == "hang":
                self.released.wait(self.hang_seconds)
                raise ServerUnreachableError("the worker did not answer in time")
            if self.mode == "fail":
                raise ServerUnreachableError("the worker dropped the request")
            return attr(*args)

        return call


_CALLS = frozenset(
    {
        "create",
        "delete",
        "put_checkpoint",
        "list_managed",
        "read_events",
        "list_queues",
        "read_queue",
        "apply_queue",
        "delete_queue",
    }
)


@dataclass
class Fleet:
    reach: WorkerReach
    manager: MemoryStore = field(default_factory=MemoryStore)
    workers: dict[str, MemoryStore] = field(
        default_factory=lambda: {"w1": MemoryStore(), "w2": MemoryStore()}
    )

    def __post_init__(self) -> None:
        self.manager.apply_many(load_objects(MANAGER))
        self.links = {name: Troubled(store, name) for name, store in self.workers.items()}
        self.controller = FederationController(
            self.manager, lambda cluster: self.links[cluster.name], reach=self.reach
        )

    def report(self, at: float) -> None:
        """Both workers report two free hosts, as their heartbeat does."""
        for name in self.workers:
            cluster = self.manager.get(Cluster, name)
            status = worker_status(hosts(2), now=to_datetime(at))
            status.dispatches, status.lease_seconds = DispatchCount(newest=0), 60.0
            self.manager.update_status(cluster.model_copy(update={"status": status}))

    def cluster_of(self, name: str) -> str | None:
        return self.manager.get(TrainingJob, name, "team").metadata.annotations.get(CLUSTER)


def test_a_worker_that_hangs_does_not_delay_another_workers_dispatch() -> None:
    fed = Fleet(WorkerReach(deadline_seconds=0.2))
    fed.report(START)
    fed.manager.create(job("a"))
    fed.controller.step(START)
    assert fed.cluster_of("a") == "w1", "the cheaper cluster, while it answers"
    slow = fed.links["w1"]
    slow.mode = "hang"
    slow.calls.clear()
    fed.manager.create(job("b"))
    try:
        began = time.monotonic()
        fed.controller.step(START + 1)
        took = time.monotonic() - began
        assert took < slow.hang_seconds * 0.8, f"the pass waited {took:.2f} s on the hanging worker"
        assert fed.cluster_of("b") == "w2", "dispatched at once to the worker that answers"
        assert fed.cluster_of("a") == "w1", "its lease holds: the work stays where it runs"
        began = time.monotonic()
        fed.controller.step(START + 2)
        assert time.monotonic() - began < slow.hang_seconds * 0.8
        assert slow.calls["list_managed"] == 1, "nothing more is sent while its call still hangs"
    finally:
        slow.released.set()


def test_a_failing_worker_is_left_alone_for_a_while_and_its_lease_still_decides() -> None:
    fed = Fleet(WorkerReach(backoff_seconds=2.0, max_backoff_seconds=4.0))
    fed.report(START)
    fed.manager.create(job("a"))
    fed.controller.step(START)
    assert fed.cluster_of("a") == "w1"
    lossy = fed.links["w1"]
    lossy.mode = "fail"
    lossy.calls.clear()
    fed.controller.step(START + 1)
    assert sum(lossy.calls.values()) == 1, "one failed call ..."
    fed.manager.create(job("b"))
    for at in (START + 1.5, START + 2, START + 2.5):
        fed.controller.step(at)
    assert sum(lossy.calls.values()) == 1, "... and none until its back-off is over"
    assert fed.cluster_of("b") == "w2", "nothing is dispatched to a worker left alone"
    fed.controller.step(START + 3)
    assert sum(lossy.calls.values()) == 2, "tried again after 2 s"
    fed.controller.step(START + 5)
    assert sum(lossy.calls.values()) == 2, "then after 4 s, the most"
    fed.controller.step(START + 7)
    assert sum(lossy.calls.values()) == 3
    assert fed.cluster_of("a") == "w1", "while its lease holds, its work stays"
    lossy.mode = "ok"
    fed.controller.step(START + 11)
    fed.manager.create(job("c"))
    fed.controller.step(START + 12)
    assert fed.cluster_of("c") == "w1", "answering again: it gets work again"


def test_a_worker_that_joins_again_is_reached_at_once_whatever_its_old_client_met() -> None:
    fed = Fleet(WorkerReach(backoff_seconds=2.0))
    fed.report(START)
    fed.controller.step(START)
    lossy = fed.links["w1"]
    lossy.mode = "fail"  # the join revoked the old token: the old client is refused ...
    fed.controller.step(START + 1)
    lossy.mode = "ok"
    lossy.calls.clear()
    # ... and the join's new token, in the Secret the Cluster names, gives the manager a new client.
    fed.manager.apply(Secret(metadata=ObjectMeta(name="w1-token", namespace=SYSTEM_NAMESPACE),
                             spec=SecretSpec(data={"token": SecretStr("new")})))  # fmt: skip
    fed.controller.step(START + 1.5)
    assert lossy.calls["list_managed"] == 1, "read at once, not after the old client's back-off"


def test_a_worker_silent_past_its_lease_loses_its_work_without_a_call_per_job() -> None:
    fed = Fleet(WorkerReach())
    fed.report(START)
    for name in ("a", "b"):
        fed.manager.create(job(name))
    fed.controller.step(START)
    assert fed.cluster_of("a") == fed.cluster_of("b") == "w1"
    lossy = fed.links["w1"]
    lossy.mode = "fail"
    fed.controller.step(START + 1)  # one failed read: left alone from now on
    calls = sum(lossy.calls.values())
    fed.controller.step(START + 60 + 5 + 1)  # its lease and the grace are over
    assert fed.cluster_of("a") != "w1" and fed.cluster_of("b") != "w1", "both moved"
    # Its back-off was over: the first job's delete was tried, failed, and left it alone again, so the
    # second job's was not sent (a lost cluster's hundreds of jobs cost one timeout, not one each).
    assert sum(lossy.calls.values()) == calls + 1


@pytest.mark.parametrize("deadline", [0.0, -1.0])
def test_a_deadline_must_be_positive(deadline: float) -> None:
    with pytest.raises(ValueError, match="deadline"):
        WorkerReach(deadline_seconds=deadline)


def test_a_worker_whose_token_goes_during_a_pass_leaves_the_pass_to_the_others() -> None:
    """A worker leaves (its token Secret revoked and replaced) between the pass's read of it and the
    resizing of its grants: its new client cannot be made, and the other worker is still served."""
    fed = Fleet(WorkerReach())
    fed.report(START)
    fed.controller.step(START)
    leaving = fed.links["w1"]
    links = fed.links

    def list_managed() -> object:
        listed = StoreWorker.list_managed(leaving)
        fed.manager.apply(Secret(metadata=ObjectMeta(name="w1-token", namespace=SYSTEM_NAMESPACE),
                                 spec=SecretSpec(data={"token": SecretStr("revoked")})))  # fmt: skip
        return listed

    def connect(cluster: Cluster) -> StoreWorker:
        if cluster.name == "w1" and fed.manager.list(Secret).items:
            raise NotFoundError("its token is revoked", obj="Cluster w1")
        return links[cluster.name]

    leaving.list_managed = list_managed  # type: ignore[method-assign]
    fed.controller.connect = connect
    fed.links["w2"].calls.clear()
    fed.controller.step(START + 1)
    assert fed.links["w2"].calls["list_queues"] == 1  # w2's grants were still looked at
