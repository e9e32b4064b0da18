"""The change feed: one thread follows the store's log and wakes the coroutines an event concerns."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from gpufleet.api.validation import parse_object
from gpufleet.server.changefeed import ChangeFeed, Interest
from gpufleet.store import SqliteStore

from .helpers import job, queue

SAFETY = 30.0
"""Seconds after which a wait counts as failed: a net for a broken feed, not a figure the test checks."""
JOBS = Interest(frozenset({"TrainingJob"}), None)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SAFETY
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {SAFETY}s"
        time.sleep(0.01)


def _write_jobs(store: SqliteStore, count: int, namespace: str = "team-a", first: int = 0) -> None:
    for index in range(first, first + count):
        store.create(parse_object(job(f"j{index}", namespace)))


def test_memory_holds_the_newest_events_and_sends_older_reads_to_the_store(store: SqliteStore) -> None:
    feed = ChangeFeed(store, keep=4)
    start = int(store.resource_version)
    assert feed.snapshot(start, JOBS) is None  # nobody follows the log yet

    async def scenario() -> None:
        with feed.client("watches"):
            await feed.wait(start, JOBS, 0.01)  # starts the thread
            assert feed.following
            await asyncio.to_thread(_write_jobs, store, 12)
            head = int(store.resource_version)
            await asyncio.to_thread(_until, lambda: _head(feed, start + 11) == head, "caught up")
            assert feed.snapshot(start, JOBS) is None  # 12 events, at most 8 kept
            page = feed.snapshot(head - 2, JOBS)
            assert page is not None and page.cursor == head
            assert [event.object.name for event in page.events] == ["j10", "j11"]
            assert page.events[-1].line.startswith(b'{"type": "ADDED", "object": {')

    asyncio.run(scenario())


def _head(feed: ChangeFeed, at: int) -> int:
    """How far the feed's memory goes, seen from `at` (which must be older than the store's head)."""
    page = feed.snapshot(at, JOBS)
    return -1 if page is None else page.cursor


def test_a_waiter_wakes_for_its_own_kind_and_namespace_only(store: SqliteStore) -> None:
    feed = ChangeFeed(store)
    store.create(parse_object(queue("team-a")))
    team_b = Interest(frozenset({"TrainingJob"}), "team-b")

    async def scenario() -> None:
        with feed.client("watches"):
            start = int(store.resource_version)
            await feed.wait(start, team_b, 0.01)  # starts the thread
            waiting = asyncio.create_task(feed.wait(start, team_b, SAFETY))
            await asyncio.to_thread(_write_jobs, store, 3, "team-a")
            await asyncio.to_thread(store.create, parse_object(queue("team-b")))
            # Those four events are in memory once the snapshot's cursor passes them.
            head = int(store.resource_version)
            await asyncio.to_thread(_until, lambda: _head(feed, start) == head, "caught up")
            await asyncio.sleep(0)  # a wake-up, had the feed sent one, would have run by now
            assert not waiting.done()
            await asyncio.to_thread(_write_jobs, store, 1, "team-b")
            await asyncio.wait_for(waiting, SAFETY)
            page = feed.snapshot(start, team_b)
            assert page is not None and [event.object.namespace for event in page.events] == ["team-b"]

    asyncio.run(scenario())


def test_waiters_on_several_event_loops_are_all_woken(store: SqliteStore) -> None:
    feed = ChangeFeed(store)
    start = int(store.resource_version)
    waiting = threading.Barrier(3)
    woken: list[bool] = []

    def waiter() -> None:
        async def wait() -> None:
            with feed.client("longPolls"):
                await feed.wait(start, JOBS, 0.01)
                task = asyncio.create_task(feed.wait(start, JOBS, SAFETY))
                await asyncio.to_thread(waiting.wait, SAFETY)
                await task
                woken.append(feed.snapshot(start, JOBS) is not None)

        asyncio.run(wait())

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for thread in threads:
        thread.start()
    waiting.wait(SAFETY)
    _write_jobs(store, 1)
    for thread in threads:
        thread.join(SAFETY)
    assert woken == [True, True]


def test_the_thread_stops_when_nobody_waits_and_starts_again_for_the_next(store: SqliteStore) -> None:
    feed = ChangeFeed(store, round_seconds=0.05)

    async def wait_once() -> None:
        with feed.client("watches"):
            await feed.wait(int(store.resource_version), JOBS, 0.01)

    asyncio.run(wait_once())
    assert feed.clients("watches") == 0
    _until(lambda: not feed.following, "stopped")
    asyncio.run(wait_once())
    assert feed.following


class _BrokenStore:
    """A store whose log cannot be read."""

    @property
    def resource_version(self) -> str:
        raise RuntimeError("disk on fire")


def test_without_a_thread_to_follow_the_log_waiters_poll_instead_of_hanging() -> None:
    feed = ChangeFeed(_BrokenStore())  # type: ignore[arg-type]

    async def scenario() -> None:
        with feed.client("watches"):
            await feed.wait(0, JOBS, SAFETY)  # starts the thread, which fails: look again
            await asyncio.wait_for(feed.wait(0, JOBS, SAFETY), SAFETY)  # polls: returns soon
            assert not feed.following

    asyncio.run(scenario())


def test_a_snapshot_holds_exactly_the_events_of_its_kinds_and_namespace_in_order(store: SqliteStore) -> None:
    feed = ChangeFeed(store)
    start = int(store.resource_version)

    async def scenario() -> None:
        with feed.client("longPolls"):
            await feed.wait(start, JOBS, 0.01)  # starts the thread
            await asyncio.to_thread(_write_mixed, store)
            head = int(store.resource_version)
            await asyncio.to_thread(_until, lambda: _head(feed, start) == head, "caught up")

            def names(kinds: set[str] | None, namespace: str | None) -> list[str]:
                page = feed.snapshot(start, Interest(None if kinds is None else frozenset(kinds), namespace))
                assert page is not None and page.cursor == head
                return [
                    f"{event.object.kind}:{event.object.namespace}/{event.object.name}"
                    for event in page.events
                ]

            assert names({"TrainingJob"}, "team-b") == ["TrainingJob:team-b/j0", "TrainingJob:team-b/j1"]
            assert names({"TrainingJob", "Queue"}, None) == [
                "Queue:None/team-a", "TrainingJob:team-a/j0", "TrainingJob:team-b/j0",
                "Queue:None/team-b", "TrainingJob:team-b/j1",
            ]  # fmt: skip
            assert names(None, "team-b") == ["TrainingJob:team-b/j0", "TrainingJob:team-b/j1"]
            assert len(names(None, None)) == 5
            assert names({"GPUPool"}, None) == []

    asyncio.run(scenario())


def _write_mixed(store: SqliteStore) -> None:
    store.create(parse_object(queue("team-a")))
    _write_jobs(store, 1, "team-a")
    _write_jobs(store, 1, "team-b")
    store.create(parse_object(queue("team-b")))
    _write_jobs(store, 1, "team-b", first=1)
