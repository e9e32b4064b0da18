"""Settings for the whole test suite."""

from __future__ import annotations

import copy
import logging
import os
import random
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.api.validation import parse_object

# The in-memory store checks that nobody changes a shared write result or event object in place
# (store/memory.py, `check_shared`): every test that reads its events is such a check.
os.environ.setdefault("GPUFLEET_STORE_CHECKS", "1")


@pytest.fixture(autouse=True)
def _no_log_stream_left_closed() -> Iterator[None]:
    """A command run under typer's CliRunner points the root logger at the runner's stderr, which is
    closed when the command returns; later tests' log lines would hit the closed stream. Such handlers
    go after each test, and the root level comes back to what the test started with."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def placement_bug(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[str], bool]], dict[str, bool]]:
    """Arms a bug in placement, the call every cycle's attempt makes: placing a workload whose core
    name `on` accepts raises OverflowError("a number placement cannot take") while the returned
    switch's "on" is True."""
    from gpufleet.scheduler import cycle

    def arm(on: Callable[[str], bool]) -> dict[str, bool]:
        real = cycle.place_workload
        bug = {"on": True}

        def place_workload(fleet: Any, workload: Any, **kwargs: Any) -> Any:
            if bug["on"] and on(workload.name):
                raise OverflowError("a number placement cannot take")
            return real(fleet, workload, **kwargs)

        monkeypatch.setattr(cycle, "place_workload", place_workload)
        return bug

    return arm


class _ContainedFailures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(autouse=True)
def _no_failure_contained_unseen(request: pytest.FixtureRequest) -> Iterator[None]:
    """The control plane logs an error no user caused and goes on with the other objects (as it must
    when running: `controllers.failures`); in a test that is a bug found, so the test fails, unless
    it is marked `contained_failures` (it makes one happen on purpose)."""
    handler = _ContainedFailures()
    logger = logging.getLogger("gpufleet.controllers.failures")
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    if handler.messages and request.node.get_closest_marker("contained_failures") is None:
        pytest.fail(f"a failure was contained: {handler.messages[0]} (its traceback is in the captured log)")


EXAMPLES = Path(__file__).parent.parent / "examples"
HOSTILE_KINDS = {
    "TrainingJob",
    "InferenceService",
    "Checkpoint",
    "ModelVersion",
    "GPUPool",
    "Queue",
    "DeviceClass",
}
HOSTILE_KINDS |= {"ResourceClaimTemplate"}
ODD_VALUES: list[Any] = [
    None, True, 0, 1, -1, 7, 8, 9, 64, 1000, 2**31, 2**62, 10**12, 0.001, 0.5, 1.5, "", "²", "0",
    "8", "100m", "1Gi", "1e12", "*", {}, [], "1g.10gb", "7g.80gb", "H100-80GB", "team-a", "serving",
    "nope", 86400 * 36500,
]  # fmt: skip
ODD_NAMES = ["a" * 58, "b" * 70, "c" * 240, "d.e", "x-" * 28, "0", "v1.2.3", "a" * 120 + ".b"]


def _seeds() -> list[dict[str, Any]]:
    texts = [p.read_text() for p in sorted(EXAMPLES.rglob("*.yaml"))]
    texts.append(resources.files("gpufleet.cli").joinpath("demo_fleet.yaml").read_text())
    docs = []
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") in HOSTILE_KINDS:
                parse_object(doc)  # every seed is valid as written
                docs.append(doc)
    return docs


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _leaves(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _leaves(child, (*path, index))
    return found


def _mutated(rng: random.Random, seeds: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """A copy of one seed with an odd name (sometimes) and one to three spec leaves set to odd values."""
    doc = copy.deepcopy(rng.choice(seeds))
    doc["metadata"]["name"] = f"{doc['metadata']['name'][:40]}-f{n}"
    if rng.random() < 0.4:
        doc["metadata"]["name"] = f"{rng.choice(ODD_NAMES)}{n}"[:253]
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _leaves(doc) if p and p[0] == "spec"]
        if not paths:  # the spec itself became a scalar
            break
        parent = doc
        target = rng.choice(paths)
        for step in target[:-1]:
            parent = parent[step]
        parent[target[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
    return doc


class HostileObjects:
    """Valid objects' odd variants (`hostile_objects`): the examples' and the demo fleet's objects of
    `HOSTILE_KINDS`, each mutated as a careless or hostile user would."""

    def __init__(self) -> None:
        self.seeds = _seeds()

    def mutated(self, rng: random.Random, n: int, kinds: set[str] | None = None) -> dict[str, Any]:
        """The `n`th object of a run (`n` makes its name unique), from seeds of `kinds` (all if None)."""
        seeds = [d for d in self.seeds if kinds is None or d["kind"] in kinds]
        return _mutated(rng, seeds, n)


@pytest.fixture(scope="session")
def hostile_objects() -> HostileObjects:
    """Odd variants of valid objects, for tests that a control plane contains what users may write."""
    return HostileObjects()
