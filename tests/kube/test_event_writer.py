"""The Events of binds: written in the order handed over, never holding a bind, dropped past the buffer."""

from __future__ import annotations

import threading

from gpufleet.kube.event_writer import EventWriter
from gpufleet.observability import metrics


def test_events_are_written_in_order_and_a_failing_one_does_not_stop_the_rest() -> None:
    writer = EventWriter(writers=1)
    written: list[int] = []

    def fail() -> None:
        raise RuntimeError("the API server refused it")

    writer.put(lambda: written.append(1))
    writer.put(fail)
    for n in (2, 3):
        writer.put(lambda n=n: written.append(n))  # type: ignore[misc]
    writer.close(wait=True)
    assert written == [1, 2, 3]


def test_past_the_buffer_the_newest_event_is_dropped_and_counted_and_put_never_blocks() -> None:
    writer = EventWriter(capacity=2, writers=1)
    release = threading.Event()
    started = threading.Event()
    written: list[str] = []

    def slow() -> None:  # an API server that does not answer
        started.set()
        release.wait(10)
        written.append("slow")

    before = metrics.EVENTS_DROPPED._value.get()
    assert writer.put(slow)
    assert started.wait(5)  # the writer holds the slow one; two more fit in the buffer
    assert writer.put(lambda: written.append("a"))
    assert writer.put(lambda: written.append("b"))
    assert not writer.put(lambda: written.append("dropped"))
    assert writer.dropped == 1 and metrics.EVENTS_DROPPED._value.get() == before + 1
    release.set()
    writer.close(wait=True)
    assert written == ["slow", "a", "b"]


def test_a_closed_writer_starts_again_when_handed_an_event() -> None:
    writer = EventWriter()
    done = threading.Event()
    writer.close(wait=True)  # never started: nothing to stop
    writer.put(done.set)
    assert done.wait(5)
    writer.close(wait=True)
