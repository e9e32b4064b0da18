"""The runtime driver settles on the participants' own writes, not on what other threads write meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api import ObjectMeta, Queue, QueueSpec
from gpufleet.api.errors import ValidationError
from gpufleet.store import SqliteStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import MAX_ROUNDS, LivelockError, Runtime


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore.open(tmp_path, synchronous="OFF") as opened:
        yield opened


def _queue(name: str) -> Queue:
    return Queue(metadata=ObjectMeta(name=name), spec=QueueSpec())


class ApiWriterMeanwhile:
    """A participant that writes nothing itself, while another thread (as the HTTP API does when a
    client deletes thousands of objects one request at a time) writes during every one of its steps."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.steps = 0

    def step(self, now: float) -> float | None:
        self.steps += 1
        writer = threading.Thread(target=self.store.create, args=(_queue(f"api-{self.steps}"),))
        writer.start()
        writer.join()
        return None


class Chaser:
    """A participant that writes at every step: a real livelock, which the driver must still catch."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.steps = 0

    def step(self, now: float) -> float | None:
        self.steps += 1
        self.store.create(_queue(f"own-{self.steps}"))
        return None


def test_writes_of_other_threads_during_a_round_do_not_keep_it_from_settling(store: SqliteStore) -> None:
    participant = ApiWriterMeanwhile(store)
    runtime = Runtime(store, clock=VirtualClock(), participants=[participant])
    assert runtime.settle() is None
    assert participant.steps == 1  # the store changed during the round, but not by the participants
    assert int(store.resource_version) == 1


def test_participants_that_keep_writing_are_still_a_livelock(store: SqliteStore) -> None:
    participant = Chaser(store)
    runtime = Runtime(store, clock=VirtualClock(), participants=[participant])
    with pytest.raises(LivelockError):
        runtime.settle()
    assert participant.steps == MAX_ROUNDS


def test_a_round_that_writes_settles_at_the_next(store: SqliteStore) -> None:
    class WritesOnce:
        def __init__(self) -> None:
            self.steps = 0

        def step(self, now: float) -> float | None:
            self.steps += 1
            if self.steps == 1:
                store.create(_queue("once"))
            return None

    participant = WritesOnce()
    Runtime(store, clock=VirtualClock(), participants=[participant]).settle()
    assert participant.steps == 2


def test_the_store_counts_each_threads_committed_writes(store: SqliteStore) -> None:
    store.apply_many([_queue("a"), _queue("b")])
    other = threading.Thread(target=store.create, args=(_queue("c"),))
    other.start()
    other.join()
    wrong = _queue("e")
    wrong.metadata.namespace = "team-a"  # refused inside the batch, after "d" was written: rolled back
    with pytest.raises(ValidationError, match="cluster-wide"):
        store.apply_many([_queue("d"), wrong])
    store.update_status(store.get(Queue, "a"))  # changes nothing: not a write
    assert store.writes_by_this_thread() == 2
    assert int(store.resource_version) == 3


def test_a_participant_that_holds_writes_until_a_quiet_step_gets_that_step(store: SqliteStore) -> None:
    class Holder:
        """Writes one queue and holds another back (as a controller holds a status) until a step of
        its own has nothing else to write, once a runtime has said it steps it until then."""

        def __init__(self) -> None:
            self.holding = False
            self.held: list[str] = []
            self.steps = 0

        def hold_until_settled(self) -> None:
            self.holding = True

        def step(self, now: float) -> float | None:
            self.steps += 1
            if self.steps == 1:
                store.create(_queue("now"))
                self.held.append("held")
            elif self.held:
                store.create(_queue(self.held.pop()))
            return None

    class Reader:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def step(self, now: float) -> float | None:
            self.seen = [q.name for q in store.list(Queue)]
            return None

    holder, reader = Holder(), Reader()
    runtime = Runtime(store, clock=VirtualClock(), participants=[holder, reader])
    assert holder.holding, "the runtime tells a Settling participant that it steps it until quiet"
    assert runtime.settle() is None
    # A round with the write, a quiet step of the holder that writes what it held, a quiet round.
    assert holder.steps == 3 and sorted(reader.seen) == ["held", "now"]
