"""The manager's event mirror reads each worker from a cursor: only the Events written since its last
read cross the link; a cursor the worker no longer keeps (410 Gone) or a new client lists once; nothing
is copied twice and nothing is lost.

The worker is the embedded HTTP API (in process, on the manager's federation token there, so the
change log's access rules are those of a real join); the manager's store is in memory."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api import load_objects
from gpufleet.api.meta import ObjectMeta
from gpufleet.api.runtime import Event, EventSpec
from gpufleet.cli.client import Client
from gpufleet.cli.federation_http import HttpWorker
from gpufleet.federation.link import MANAGED_BY, EventPage
from gpufleet.federation.sync import EventMirror, Key
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.federation_access import MANAGER_ROLE
from gpufleet.store.memory import MemoryStore
from gpufleet.store.sqlite import SqliteStore

HELD: set[Key] = {("TrainingJob", "team", "llm")}

JOBS = f"""
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {{name: team}}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: llm, namespace: team, annotations: {{{MANAGED_BY}: manager}}}}
spec: {{queue: team, replicas: 1, worker: {{gpus: 8}}}}
---
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {{name: own, namespace: team}}
spec: {{queue: team, replicas: 1, worker: {{gpus: 8}}}}
"""


class Recorded:
    """A worker's link that notes the cursor of each read and how many Events it answered."""

    def __init__(self, inner: HttpWorker) -> None:
        self.inner = inner
        self.reads: list[tuple[str | None, int]] = []

    def read_events(self, namespaces: Collection[str], since: str | None) -> EventPage:
        try:
            events, cursor = self.inner.read_events(namespaces, since)
        except Exception:
            self.reads.append((since, -1))
            raise
        self.reads.append((since, len(events)))
        return events, cursor


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[SqliteStore, Recorded]]:
    with SqliteStore.open(tmp_path, synchronous="OFF") as store:
        store.apply_many(load_objects(JOBS))
        tokens = TokenRegistry(tmp_path)
        client = Client("http://worker.test", None)
        http = TestClient(create_app(store, tokens), raise_server_exceptions=False)
        http.headers["Authorization"] = f"Bearer {tokens.create_role(MANAGER_ROLE, 'w1')}"
        client._http = http
        yield store, Recorded(HttpWorker(client))


def write_events(store: SqliteStore, first: int, count: int, about: str = "llm") -> None:
    for i in range(first, first + count):
        store.create(
            Event(
                metadata=ObjectMeta(name=f"{about}.{i}", namespace="team"),
                spec=EventSpec(
                    involved_kind="TrainingJob",
                    involved_name=about,
                    reason="Progress",
                    message=f"step {i}",
                    time=datetime(2030, 1, 1, tzinfo=UTC),
                ),
            )
        )


def mirror_once(mirror: EventMirror, link: Recorded, now: float) -> None:
    mirror.copy("w1", link, HELD, mirror.fetch("w1", link, HELD, now))  # type: ignore[arg-type]


def mirrored(manager: MemoryStore) -> list[str]:
    return [e.spec.message for e in manager.list(Event, namespace="team")]


def test_after_the_first_list_only_events_written_since_the_last_read_are_read(
    worker: tuple[SqliteStore, Recorded],
) -> None:
    store, link = worker
    manager = MemoryStore()
    mirror = EventMirror(manager, period_seconds=5.0)
    write_events(store, 0, 40)
    write_events(store, 0, 5, about="own")  # the worker's own job: not the manager's to read
    mirror_once(mirror, link, 0.0)
    assert link.reads == [(None, 40)], "the first read lists the namespace"
    write_events(store, 40, 3)
    mirror_once(mirror, link, 2.0)
    assert len(link.reads) == 1, "not read again within its period"
    mirror_once(mirror, link, 5.0)
    since, count = link.reads[-1]
    assert since is not None and count == 3, "from the cursor: the three new Events only"
    mirror_once(mirror, link, 10.0)
    assert link.reads[-1][1] == 0, "nothing new: nothing read"
    assert sorted(mirrored(manager)) == sorted(f"[w1] step {i}" for i in range(43)), "each once"


def test_a_cursor_the_worker_no_longer_keeps_falls_back_to_one_full_list_without_duplicates(
    worker: tuple[SqliteStore, Recorded],
) -> None:
    store, link = worker
    manager = MemoryStore()
    mirror = EventMirror(manager, period_seconds=5.0)
    write_events(store, 0, 10)
    mirror_once(mirror, link, 0.0)
    write_events(store, 10, 4)
    store.compact(keep=1)  # what came after the mirror's cursor is no longer in the change log
    mirror_once(mirror, link, 5.0)
    assert [count for _, count in link.reads] == [10, -1, 14], "410 Gone, then one full list"
    assert link.reads[2][0] is None
    assert sorted(mirrored(manager)) == sorted(f"[w1] step {i}" for i in range(14)), "none lost, none twice"
    write_events(store, 14, 1)
    mirror_once(mirror, link, 10.0)
    assert link.reads[-1][0] is not None and link.reads[-1][1] == 1, "then from a cursor again"
    assert len(mirrored(manager)) == 15


def test_a_new_client_for_the_worker_reads_everything_once_and_copies_nothing_twice(
    worker: tuple[SqliteStore, Recorded],
) -> None:
    store, link = worker
    manager = MemoryStore()
    mirror = EventMirror(manager, period_seconds=5.0)
    write_events(store, 0, 6)
    mirror_once(mirror, link, 0.0)
    # The worker joined again: the manager reaches it through another client, whose cursor it has not.
    again = Recorded(link.inner)
    write_events(store, 6, 2)
    mirror_once(mirror, again, 5.0)
    assert again.reads == [(None, 8)]
    assert sorted(mirrored(manager)) == sorted(f"[w1] step {i}" for i in range(8))
