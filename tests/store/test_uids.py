"""A new object's uid: a version 4 UUID, never the same twice, in one process or across a fork."""

from __future__ import annotations

import os
import uuid

from gpufleet.store.objects import new_uid


def test_a_uid_is_a_version_4_uuid_in_its_usual_form() -> None:
    for _ in range(2_000):
        text = new_uid()
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text


def test_no_uid_repeats() -> None:
    drawn = [new_uid() for _ in range(50_000)]
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_draws_other_uids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next uids, then out without running the parent's clean-up
        os.close(read)
        os.write(write, " ".join(new_uid() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    parent = {new_uid() for _ in range(100)}
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    assert len(child) == 100
    assert not parent & child
