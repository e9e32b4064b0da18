"""Random sequences of writes against a dict model of Kubernetes semantics.

After every step the store must agree with the model, and replaying the store's event log from the
start must rebuild exactly what a list returns: a watcher never misses or reorders a change.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpufleet.api import TrainingJob
from gpufleet.api.errors import ConflictError, NotFoundError
from gpufleet.store import MemoryStore, SqliteStore
from gpufleet.store.protocol import ObjectRef

from .conftest import job

NAMES = st.sampled_from(["a", "b", "c"])
NAMESPACES = st.sampled_from(["team-a", "team-b"])
FINALIZER = "gpufleet.io/cleanup"


@dataclass
class Expected:
    replicas: int
    phase: str = "Pending"
    generation: int = 1
    version: int = 0
    finalizers: list[str] = field(default_factory=list)
    deleting: bool = False


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp())
        self.store: SqliteStore | MemoryStore = SqliteStore.open(self.directory, synchronous="OFF")
        self.model: dict[tuple[str, str], Expected] = {}
        self.head = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _wrote(self) -> int:
        self.head += 1
        return self.head

    @rule(ns=NAMESPACES, name=NAMES, replicas=st.integers(1, 4), finalized=st.booleans())
    def create(self, ns: str, name: str, replicas: int, finalized: bool) -> None:
        obj = job(name, ns, replicas=replicas)
        obj.metadata.finalizers = [FINALIZER] if finalized else []
        if (ns, name) in self.model:
            try:
                self.store.create(obj)
                raise AssertionError("create of an existing object succeeded")
            except ConflictError:
                return
        created = self.store.create(obj)
        self.model[(ns, name)] = Expected(replicas, version=self._wrote(), finalizers=obj.metadata.finalizers)
        assert created.metadata.resource_version == str(self.head)

    @rule(ns=NAMESPACES, name=NAMES, replicas=st.integers(1, 4), stale=st.booleans())
    def update_spec(self, ns: str, name: str, replicas: int, stale: bool) -> None:
        expected = self.model.get((ns, name))
        obj = job(name, ns, replicas=replicas)
        if expected is None:
            try:
                self.store.update(obj)
                raise AssertionError("update of a missing object succeeded")
            except NotFoundError:
                return
        obj.metadata.finalizers = list(expected.finalizers)
        obj.metadata.resource_version = str(expected.version - 1 if stale else expected.version)
        if stale:
            try:
                self.store.update(obj)
                raise AssertionError("stale update succeeded")
            except ConflictError:
                return
        self.store.update(obj)
        if replicas != expected.replicas:
            expected.replicas = replicas
            expected.generation += 1
            expected.version = self._wrote()

    @rule(ns=NAMESPACES, name=NAMES, phase=st.sampled_from(["Pending", "Running", "Failed"]))
    def update_status(self, ns: str, name: str, phase: str) -> None:
        expected = self.model.get((ns, name))
        if expected is None:
            return
        current = self.store.get(TrainingJob, name, ns)
        current.status.phase = phase  # type: ignore[assignment]
        current.spec.replicas = 99  # ignored by update_status
        self.store.update_status(current)
        if phase != expected.phase:
            expected.phase = phase
            expected.version = self._wrote()

    @rule(ns=NAMESPACES, name=NAMES)
    def delete(self, ns: str, name: str) -> None:
        expected = self.model.get((ns, name))
        if expected is None:
            try:
                self.store.delete(TrainingJob, name, ns)
                raise AssertionError("delete of a missing object succeeded")
            except NotFoundError:
                return
        result = self.store.delete(TrainingJob, name, ns)
        if expected.finalizers:
            assert result is not None
            if not expected.deleting:
                expected.deleting = True
                expected.version = self._wrote()
        else:
            assert result is None
            del self.model[(ns, name)]
            self._wrote()

    @rule(ns=NAMESPACES, name=NAMES)
    def delete_with_a_missing_one(self, ns: str, name: str) -> None:
        # The batch fails at its last object: the deletion before it is undone with it.
        if (ns, name) not in self.model:
            return
        refs = [ObjectRef("TrainingJob", name, ns), ObjectRef("TrainingJob", "missing", ns)]
        try:
            self.store.delete_many(refs)
            raise AssertionError("a batch deleting a missing object succeeded")
        except NotFoundError:
            pass

    @rule(ns=NAMESPACES, name=NAMES)
    def remove_finalizer(self, ns: str, name: str) -> None:
        expected = self.model.get((ns, name))
        if expected is None or not expected.finalizers:
            return
        current = self.store.get(TrainingJob, name, ns)
        current.metadata.finalizers = []
        self.store.update(current)
        self._wrote()
        if expected.deleting:
            del self.model[(ns, name)]
        else:
            expected.finalizers = []
            expected.version = self.head

    @invariant()
    def store_matches_model(self) -> None:
        listed = {(o.metadata.namespace or "", o.name): o for o in self.store.list(TrainingJob)}
        assert set(listed) == set(self.model)
        for key, expected in self.model.items():
            got = listed[key]
            assert got.spec.replicas == expected.replicas
            assert got.status.phase == expected.phase
            assert got.metadata.generation == expected.generation
            assert got.metadata.resource_version == str(expected.version)
            assert got.metadata.finalizers == expected.finalizers
            assert (got.metadata.deletion_timestamp is not None) == expected.deleting
        assert self.store.resource_version == str(self.head)

    @invariant()
    def replaying_events_rebuilds_the_list(self) -> None:
        state: dict[tuple[str, str], TrainingJob] = {}
        last = 0
        for event in self.store.events_since(0):
            assert event.resource_version > last
            last = event.resource_version
            key = (event.object.metadata.namespace or "", event.object.name)
            assert isinstance(event.object, TrainingJob)
            assert (event.type == "ADDED") == (key not in state)
            if event.type == "DELETED":
                del state[key]
            else:
                state[key] = event.object
        assert state == {(o.metadata.namespace or "", o.name): o for o in self.store.list(TrainingJob)}


StoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_store_state_machine = StoreMachine.TestCase


class MemoryStoreMachine(StoreMachine):
    """The same random sequences against the in-memory store."""

    def __init__(self) -> None:
        super().__init__()
        self.store.close()
        self.store = MemoryStore()


MemoryStoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_memory_store_state_machine = MemoryStoreMachine.TestCase


class SharedMemoryStoreMachine(StoreMachine):
    """The simulator's store: results shared with their events, and status writes and deletions
    derived from the previous result (`store.derived`); every event read is compared with its
    stored form."""

    def __init__(self) -> None:
        super().__init__()
        self.store.close()
        self.store = MemoryStore(share_results=True, check_shared=True)


SharedMemoryStoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_shared_memory_store_state_machine = SharedMemoryStoreMachine.TestCase
