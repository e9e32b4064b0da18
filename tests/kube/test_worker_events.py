"""The manager's watched feed of a Kubernetes worker's Events (`kube.worker_events`): after one list a
read hands only what the worker wrote since the last one; a cursor the feed no longer keeps, or one of
another feed, is Gone (the mirror lists again); Events about anything but jobs and services never cross
the network; until the feed has listed, the worker's Events are listed as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from gpufleet.api.errors import GoneError
from gpufleet.kube.federation import KubeWorker
from gpufleet.kube.transport import Json
from gpufleet.kube.worker_cache import CopyCache
from gpufleet.kube.worker_events import EventFeed

from .fakeapi import FakeApiServer

EVENTS = "/api/v1/namespaces/team/events"
T = TypeVar("T")


def event(name: str, kind: str = "TrainingJob", about: str = "llm") -> Json:
    return {
        "metadata": {"name": name, "namespace": "team"},
        "involvedObject": {"kind": kind, "name": about, "namespace": "team"},
        "reason": "Progress",
        "message": name,
        "type": "Normal",
        "lastTimestamp": "2030-03-17T17:46:40Z",
    }


def until(check: Callable[[], T | None], what: str, seconds: float = 10.0) -> T:
    deadline = time.monotonic() + seconds
    while (found := check()) is None:
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return found


@pytest.fixture
def api() -> FakeApiServer:
    server = FakeApiServer()
    server.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    return server


@pytest.fixture
def worker(api: FakeApiServer) -> Iterator[KubeWorker]:
    client = KubeWorker(api, name="w1", cache=CopyCache(api, watch_seconds=1))
    yield client
    assert client.cache is not None
    client.cache.close()


def test_after_one_list_a_read_hands_only_what_the_worker_wrote_since(
    api: FakeApiServer, worker: KubeWorker
) -> None:
    for i in range(5):
        api.request("POST", EVENTS, body=event(f"llm.{i}"))
    api.request("POST", EVENTS, body=event("web.0", kind="Pod", about="web-0"))  # not gpufleet work
    assert worker.cache is not None
    worker.read_events(["team"], None)  # starts the watches
    until(lambda: worker.cache.events.synced or None, "the feed did not list")  # type: ignore[union-attr]
    first, cursor = worker.read_events(["team"], None)
    assert sorted(e.name for e in first) == [f"llm.{i}" for i in range(5)]
    assert cursor is not None
    api.request("POST", EVENTS, body=event("llm.5"))
    api.request("POST", EVENTS, body=event("chat.0", kind="InferenceService", about="chat"))

    def new() -> tuple[list[str], str | None] | None:
        events, after = worker.read_events(["team"], cursor)
        return ([e.name for e in events], after) if len(events) == 2 else None

    names, after = until(new, "the new Events did not come")
    assert sorted(names) == ["chat.0", "llm.5"], "the two new ones, nothing listed before"
    assert after is not None
    events, _ = worker.read_events(["team"], after)
    assert events == [], "read: not handed again"


def test_a_cursor_the_feed_no_longer_keeps_or_of_another_feed_is_gone(api: FakeApiServer) -> None:
    stop = threading.Event()
    feed, other = EventFeed(api, watch_seconds=1, keep=3), EventFeed(api, watch_seconds=1)
    try:
        for started in (feed, other):
            started.start(stop)
        until(lambda: (feed.synced and other.synced) or None, "the feeds did not list")
        _, cursor = feed.read(["team"], None) or ([], "")
        for i in range(4):
            api.request("POST", EVENTS, body=event(f"llm.{i}"))

        def gone() -> bool | None:
            try:
                feed.read(["team"], cursor)  # the same cursor: nothing is taken as read
            except GoneError:
                return True
            return None

        until(gone, "four came and three are kept: the first is lost to this cursor")
        _, theirs = other.read(["team"], None) or ([], "")
        with pytest.raises(GoneError):
            feed.read(["team"], theirs)
    finally:
        stop.set()


def test_until_the_feed_has_listed_the_worker_s_events_are_listed(api: FakeApiServer) -> None:
    api.request("POST", EVENTS, body=event("llm.0"))
    plain = KubeWorker(api, name="w1")
    events, cursor = plain.read_events(["team"], None)
    assert [e.name for e in events] == ["llm.0"] and cursor is None, "no cache: a list, no cursor"
