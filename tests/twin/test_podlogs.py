"""The twin's pod log book: bounded per pod and in pods, numbered across pods so a follower of a pod or
of a whole job asks for what came after the last line it saw."""

from __future__ import annotations

import pytest

from gpufleet.twin.podlogs import PodLogBook


def test_lines_are_numbered_across_pods_and_read_by_job_after_a_number() -> None:
    book = PodLogBook()
    book.write(("ml", "a-0"), 0.0, "placed", owner=("TrainingJob", "a"))
    book.write(("ml", "b-0"), 1.0, "placed", owner=("TrainingJob", "b"))
    book.write(("ml", "a-1"), 2.0, "placed", owner=("TrainingJob", "a"))
    book.write(("ml", "a-0"), 3.0, "started")
    assert book.pods_of("ml", "TrainingJob", "a") == ["a-0", "a-1"]
    page = book.read("ml", ["a-0", "a-1"])
    assert [(line.pod, line.text) for line in page.lines] == [
        ("a-0", "1970-01-01T00:00:00Z placed"),
        ("a-1", "1970-01-01T00:00:02Z placed"),
        ("a-0", "1970-01-01T00:00:03Z started"),
    ]
    assert page.next == 4 and book.read("ml", ["a-0", "a-1"], after=page.next).lines == []
    book.write(("ml", "a-1"), 4.0, "checkpoint written at step 4")
    assert [line.text for line in book.read("ml", ["a-1"], after=page.next).lines] == [
        "1970-01-01T00:00:04Z checkpoint written at step 4"
    ]


def test_the_book_keeps_the_newest_lines_of_the_newest_pods() -> None:
    book = PodLogBook(lines_per_pod=2, pods=2)
    for i in range(3):
        book.write(("ml", "a-0"), float(i), f"line {i}", owner=("TrainingJob", "a"))
    assert [line.text[-6:] for line in book.read("ml", ["a-0"]).lines] == ["line 1", "line 2"]
    book.write(("ml", "b-0"), 5.0, "placed", owner=("TrainingJob", "b"))
    book.write(("ml", "c-0"), 6.0, "placed", owner=("TrainingJob", "c"))
    assert not book.has(("ml", "a-0")) and book.pods_of("ml", "TrainingJob", "a") == []
    assert book.has(("ml", "c-0"))


def test_a_book_of_no_pods_keeps_nothing_and_a_negative_size_is_refused() -> None:
    book = PodLogBook(pods=0)
    book.write(("ml", "a-0"), 0.0, "placed", owner=("TrainingJob", "a"))
    assert not book.has(("ml", "a-0")) and book.pods_of("ml", "TrainingJob", "a") == []
    assert book.read("ml", ["a-0"]).lines == []
    with pytest.raises(ValueError, match="pods must be >= 0"):
        PodLogBook(pods=-1)
