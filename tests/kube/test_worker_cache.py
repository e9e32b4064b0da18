"""The manager's watched copy of a worker's jobs and services (`kube.worker_cache`): after one list a
pass reads only what changed, the manager's own creates and deletes count at once, and a worker out of
touch is said (the list falls back and raises) rather than hidden behind the cache."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.training import TrainingJob
from gpufleet.federation.link import GENERATION, MANAGED_BY
from gpufleet.kube.federation import KubeWorker, WorkerUnreachable
from gpufleet.kube.store import KubeStore
from gpufleet.kube.transport import Json
from gpufleet.kube.worker_cache import CopyCache

from .fakeapi import FakeApiServer
from .test_federation_kube import job

COLLECTIONS = ("/apis/gpufleet.io/v1alpha1/trainingjobs", "/apis/gpufleet.io/v1alpha1/inferenceservices")


class Gated:
    """The worker's API server with watch lines held back while `open` is clear."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        self.open = threading.Event()
        self.open.set()

    def request(self, method: str, path: str, **kwargs: Any) -> Json:
        return self.api.request(method, path, **kwargs)

    def watch(self, path: str, *, query: Mapping[str, str | int | bool], timeout: float) -> Iterator[Json]:
        for line in self.api.watch(path, query=query, timeout=timeout):
            self.open.wait()
            yield line


def wait(what: str, check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.02)


def copy_of(name: str, generation: int) -> TrainingJob:
    obj = job(name)
    obj.metadata = ObjectMeta(
        name=name, namespace="team", annotations={MANAGED_BY: "manager", GENERATION: str(generation)}
    )
    return obj


@pytest.fixture
def api() -> FakeApiServer:
    server = FakeApiServer()
    server.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    return server


@pytest.fixture
def watched(api: FakeApiServer) -> Iterator[tuple[KubeWorker, Gated]]:
    gated = Gated(api)
    cache = CopyCache(gated, watch_seconds=1)
    worker = KubeWorker(api, name="w1", cache=cache)
    yield worker, gated
    gated.open.set()
    cache.close()


def names(worker: KubeWorker) -> dict[str, str]:
    return {obj.name: obj.metadata.annotations.get(GENERATION, "") for obj in worker.list_managed()}


def synced(worker: KubeWorker) -> bool:
    assert worker.cache is not None
    worker.cache.start()  # as the first list_managed does
    return worker.cache.managed() is not None


def caught_up(worker: KubeWorker) -> bool:
    assert worker.cache is not None
    worker.cache.managed()
    return worker.cache.unconfirmed == 0


def test_after_one_list_a_pass_reads_only_what_changed(
    api: FakeApiServer, watched: tuple[KubeWorker, Gated]
) -> None:
    worker, _ = watched
    store = KubeStore(api)
    for n in range(40):  # the worker's own work and the manager's copies
        store.create(copy_of(f"m{n}", 1) if n % 2 else job(f"local{n}"))
    assert len(worker.list_managed()) == 40, "a list while the watch starts"
    wait("the cache lists", lambda: synced(worker))
    before = len(api.requests)
    for _ in range(20):
        listed = worker.list_managed()
    reads = [r for r in api.requests[before:] if r[0] == "GET" and r[1] in COLLECTIONS]
    assert reads == [], "twenty passes and no list of the worker's jobs"
    assert sorted(o.name for o in listed) == sorted(o.name for o in store.list(TrainingJob))

    running = store.get(TrainingJob, "m1", "team")
    running.status.phase = "Running"
    store.update_status(running)
    wait("a change in the worker reaches the list", lambda: _phase(worker, "m1") == "Running")


def _phase(worker: KubeWorker, name: str) -> str | None:
    return next((o.status.phase for o in worker.list_managed() if o.name == name), None)


def test_the_managers_creates_and_deletes_count_before_their_watch_events(
    api: FakeApiServer, watched: tuple[KubeWorker, Gated]
) -> None:
    worker, gated = watched
    wait("the cache lists", lambda: synced(worker))
    worker.create(copy_of("train", 1))
    wait("the watch has the copy", lambda: caught_up(worker))
    gated.open.clear()  # from here the watch shows nothing new
    assert names(worker) == {"train": "1"}
    worker.delete("TrainingJob", "team", "train")
    assert names(worker) == {}, "deleted: gone at once, though the cache still holds it"
    worker.create(copy_of("train", 2))
    assert names(worker) == {"train": "2"}, "the new generation, not the old one the cache holds"
    worker.create(copy_of("serve", 1))
    assert names(worker) == {"train": "2", "serve": "1"}
    worker.create(copy_of("gone", 1))
    worker.delete("TrainingJob", "team", "gone")
    worker.delete("TrainingJob", "team", "train")
    assert names(worker) == {"serve": "1"}, (
        "neither generation shows, though the watch has shown neither gone"
    )
    gated.open.set()
    wait("the watch catches up", lambda: caught_up(worker))
    assert names(worker) == {"serve": "1"}


def test_a_worker_out_of_touch_is_said_and_not_hidden_behind_the_cache(
    api: FakeApiServer, watched: tuple[KubeWorker, Gated]
) -> None:
    worker, _ = watched
    KubeStore(api).create(copy_of("train", 1))
    wait("the cache lists", lambda: synced(worker))
    api.fail_next(10_000, status=0)  # the API server is gone: the next watch round fails
    wait("the cache stops answering", lambda: not synced(worker))
    with pytest.raises(WorkerUnreachable):
        worker.list_managed()
    api.failures.clear()
    wait("back in touch", lambda: synced(worker), timeout=10)
    assert names(worker) == {"train": "1"}


def test_a_closed_cache_is_not_used_until_started_again(
    api: FakeApiServer, watched: tuple[KubeWorker, Gated]
) -> None:
    worker, _ = watched
    wait("the cache lists", lambda: synced(worker))
    assert worker.cache is not None
    worker.cache.close()
    KubeStore(api).create(copy_of("late", 1))
    assert worker.cache.managed() is None
    assert names(worker) == {"late": "1"}, "listed: a closed cache no longer follows the worker"
    wait("watching again (a replica that leads again)", lambda: synced(worker))
    KubeStore(api).create(copy_of("later", 1))
    wait("the new watch follows the worker", lambda: "later" in names(worker))
