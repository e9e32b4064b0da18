"""The federation tokens of `gpufleet cluster join` expire and are renewed by `gpufleet cluster rotate`,
end to end in this process: a manager plane and a worker plane, each a store with its HTTP API on
loopback, on one virtual clock (the planes' tokens expire on it too). A rotation keeps the worker's
running job where it is and the federation working on the new tokens alone; a rotation with either
side down changes nothing; the manager warns on the Cluster before the tokens run out, once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from gpufleet.api import load_objects
from gpufleet.api.cluster import Cluster
from gpufleet.api.runtime import Event
from gpufleet.api.secret import SYSTEM_NAMESPACE, Secret
from gpufleet.api.training import TrainingJob
from gpufleet.cli.client import AuthError
from gpufleet.federation.expiry import TOKENS_EXPIRING, lifetime_of
from gpufleet.federation.join import MANAGER_SECRET
from gpufleet.federation.link import CLUSTER, FENCED, GENERATION
from gpufleet.server.federation_access import MANAGER_ROLE, WORKER_ROLE

from .conftest import Result
from .joined_planes import Federation as JoinedPlanes
from .joined_planes import Plane, joined_planes

JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: team}
spec: {queue: team, replicas: 1, worker: {gpus: 8, gpuModel: H100-80GB}, durationSeconds: 100000}
"""
TOKEN = "cluster-w1-token"


@dataclass
class Federation(JoinedPlanes):
    cli: Callable[..., Result]

    def command(self, verb: str, *args: str) -> Result:
        """`gpufleet cluster VERB w1` with both planes' admin tokens, while the planes run on (in a
        thread: a rotation waits for each side to use its new token)."""
        addressing = ("--manager", self.manager.url, "--manager-token", self.manager.tokens.admin_token)
        worker = ("--server", self.worker.url, "--token", self.worker.tokens.admin_token)
        stop = threading.Event()

        def go_on() -> None:
            while not stop.is_set():
                self.run(1)
                stop.wait(0.02)

        running = threading.Thread(target=go_on, daemon=True)
        running.start()
        try:
            return self.cli("cluster", verb, "w1", *addressing, *args, *worker)
        finally:
            stop.set()
            running.join(timeout=30)

    def tokens(self) -> tuple[str, str]:
        """The manager's token into the worker and the worker's into the manager, as the join wrote."""
        into_worker = self.manager.store.get(Secret, TOKEN, SYSTEM_NAMESPACE).value("token")
        return into_worker, self.worker.store.get(Secret, MANAGER_SECRET, SYSTEM_NAMESPACE).value("token")


@pytest.fixture
def federation(tmp_path: Path, cli: Callable[..., Result]) -> Iterator[Federation]:
    with joined_planes(tmp_path) as (manager, worker, clock, runtimes):
        yield Federation(manager, worker, clock, runtimes, cli)


def works(plane: Plane, token: str) -> bool:
    try:
        plane.client(token).get("/v1/whoami")
    except AuthError:
        return False
    return True


def heartbeat(federation: Federation) -> datetime | None:
    return federation.manager.store.get(Cluster, "w1").status.heartbeat_time


def test_rotation_keeps_the_job_running_and_the_federation_working_on_the_new_tokens_alone(
    federation: Federation, caplog: pytest.LogCaptureFixture
) -> None:
    manager, worker = federation.manager, federation.worker
    joined = federation.command("join", "--lease-seconds", "10", "--token-ttl", "30d")
    assert joined.code == 0, joined.err
    assert "expire at" in joined.out
    manager.store.apply(load_objects(JOB)[0])
    federation.until(
        "llm running in w1", lambda: manager.store.get(TrainingJob, "llm", "team").status.phase == "Running"
    )
    held = manager.store.get(TrainingJob, "llm", "team")
    copy = worker.store.get(TrainingJob, "llm", "team")
    old_worker_token, old_manager_token = federation.tokens()
    issued = lifetime_of(manager.store.get(Secret, TOKEN, SYSTEM_NAMESPACE))
    assert issued is not None and (issued.expires - issued.issued).days == 30

    caplog.clear()
    rotated = federation.command("rotate", "--token-ttl", "60d")
    assert rotated.code == 0, rotated.err
    # A refused call between the planes is a warning (the back-off's or the heartbeat's) naming the
    # token; the client's own INFO lines name the token endpoints too.
    refused = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "token" in r.getMessage()
    ]
    assert refused == [], "no call between the planes was refused during the rotation"
    new_worker_token, new_manager_token = federation.tokens()
    assert {new_worker_token, new_manager_token}.isdisjoint({old_worker_token, old_manager_token})
    assert not works(worker, old_worker_token) and not works(manager, old_manager_token), "old ones revoked"
    assert works(worker, new_worker_token) and works(manager, new_manager_token)
    renewed = lifetime_of(manager.store.get(Secret, TOKEN, SYSTEM_NAMESPACE))
    assert renewed is not None and (renewed.expires - renewed.issued).days == 60

    # The job ran on where it was: the same copy, never fenced, never sent again.
    now_copy = worker.store.get(TrainingJob, "llm", "team")
    assert now_copy.metadata.uid == copy.metadata.uid and now_copy.status.phase == "Running"
    assert FENCED not in now_copy.metadata.annotations and not now_copy.spec.suspend
    now_held = manager.store.get(TrainingJob, "llm", "team")
    assert now_held.metadata.annotations[CLUSTER] == "w1" and now_held.status.phase == "Running"
    assert now_held.metadata.annotations[GENERATION] == held.metadata.annotations[GENERATION]
    assert now_held.status.restarts == 0

    # Both directions work on the new tokens alone: the worker reports, the manager mirrors and deletes.
    before = heartbeat(federation)
    federation.until("a heartbeat after the rotation", lambda: heartbeat(federation) != before)
    manager.store.delete(TrainingJob, "llm", "team")
    federation.until("the copy deleted from w1", lambda: not list(worker.store.list(TrainingJob)))


@pytest.mark.parametrize("down", ["worker", "manager"])
def test_a_rotation_with_one_side_down_changes_nothing_and_names_that_side(
    federation: Federation, down: str
) -> None:
    manager, worker = federation.manager, federation.worker
    assert federation.command("join", "--lease-seconds", "10").code == 0
    old_worker_token, old_manager_token = federation.tokens()
    secrets = {
        "manager": manager.store.get(Secret, TOKEN, SYSTEM_NAMESPACE).metadata.resource_version,
        "worker": worker.store.get(Secret, MANAGER_SECRET, SYSTEM_NAMESPACE).metadata.resource_version,
    }
    roles = {"manager": WORKER_ROLE, "worker": MANAGER_ROLE}
    planes = {"manager": manager, "worker": worker}

    def ids(side: str) -> set[str]:
        return {t["id"] for t in planes[side].tokens.role_tokens(roles[side], "w1")}

    minted = {side: ids(side) for side in planes}
    planes[down].stop()

    rotated = federation.command("rotate")
    assert rotated.code == 1
    side = "the worker cluster w1 at" if down == "worker" else "the manager at"
    assert f"{side} {planes[down].url} failed" in rotated.err
    assert "nothing was changed: the old tokens stay valid" in rotated.err
    up = "manager" if down == "worker" else "worker"
    assert ids(up) == minted[up], "no token minted or revoked on the side that answered"
    secret = (TOKEN, SYSTEM_NAMESPACE) if up == "manager" else (MANAGER_SECRET, SYSTEM_NAMESPACE)
    assert planes[up].store.get(Secret, *secret).metadata.resource_version == secrets[up]
    assert federation.tokens() == (old_worker_token, old_manager_token)
    if up == "manager":
        assert works(manager, old_manager_token), "the worker's old token still works"
    else:
        assert works(worker, old_worker_token), "the manager's old token still works"


def test_the_manager_warns_once_before_the_tokens_expire_and_an_expired_token_is_refused(
    federation: Federation,
) -> None:
    manager, worker = federation.manager, federation.worker
    assert federation.command("join", "--lease-seconds", "10", "--token-ttl", "1000s").code == 0
    into_worker, into_manager = federation.tokens()
    times = lifetime_of(manager.store.get(Secret, TOKEN, SYSTEM_NAMESPACE))
    assert times is not None

    def warnings() -> list[Event]:
        return [e for e in manager.store.list(Event) if e.spec.reason == TOKENS_EXPIRING]

    federation.run(3)
    assert warnings() == [], "nine tenths of the lifetime are left"
    federation.clock.advance_to(times.warn_from().timestamp() - 1)
    federation.run(10)
    (warning,) = warnings()
    assert warning.spec.involved_kind == "Cluster" and warning.spec.involved_name == "w1"
    assert warning.spec.type == "Warning" and "gpufleet cluster rotate w1" in warning.spec.message
    assert times.expires.isoformat() in warning.spec.message

    federation.clock.advance_to(times.expires.timestamp())
    federation.run(3)
    assert len(warnings()) == 1, "once"
    # Each plane minted its token at its own moment of the join, while the planes ran on (on a busy
    # machine, seconds of the virtual clock apart); `times` has the earlier expiry, so the clock goes
    # on past the later one.
    (worker_into_manager,) = manager.tokens.role_tokens(WORKER_ROLE, "w1")
    (manager_into_worker,) = worker.tokens.role_tokens(MANAGER_ROLE, "w1")
    last = max(datetime.fromisoformat(t["expires"]) for t in (worker_into_manager, manager_into_worker))
    federation.clock.advance_to(max(federation.clock.now(), last.timestamp()))
    federation.run(1)
    assert len(warnings()) == 1, "still once"
    with pytest.raises(AuthError) as refused:
        manager.client(into_manager).get("/v1/whoami")
    assert "the federation token of cluster w1" in str(refused.value) and "expired at" in str(refused.value)
    assert into_manager not in str(refused.value)
    with pytest.raises(AuthError, match=r"the federation manager's token .*expired at"):
        worker.client(into_worker).get("/v1/whoami")


def test_tokens_that_never_expire_are_asked_for_explicitly_and_a_bad_ttl_changes_nothing(
    federation: Federation,
) -> None:
    manager, worker = federation.manager, federation.worker
    bad = federation.command("join", "--token-ttl", "soon")
    assert bad.code == 2 and "--token-ttl" in bad.err and "30m" in bad.err
    assert manager.tokens.role_tokens(WORKER_ROLE, "w1") == [], "refused before anything was minted"
    too_long = federation.command("join", "--token-ttl", "99999999d")
    assert too_long.code == 2 and "--token-ttl" in too_long.err and "100 years" in too_long.err
    assert manager.tokens.role_tokens(WORKER_ROLE, "w1") == []

    never = federation.command("join", "--token-ttl", "never")
    assert never.code == 0, never.err
    assert "never expire" in never.out
    assert lifetime_of(manager.store.get(Secret, TOKEN, SYSTEM_NAMESPACE)) is None
    (minted,) = worker.tokens.role_tokens(MANAGER_ROLE, "w1")
    assert "expires" not in minted
