"""Objects a careless or hostile user may write, each valid to the API, must never fail the control
plane: the demo fleet and a dozen mutated objects (odd names, extreme and odd values in any spec
field) run three virtual hours through the twin and every controller, and no reconcile may fail and
no round may raise. Seeded, so a failure replays. Before the API refused them, such objects failed
the controllers (names they turned into invalid labels, a node's CPU past the fleet's 64-bit counts):
two of these three seeds met one."""

from __future__ import annotations

import copy
import random
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.api.errors import GpuFleetError
from gpufleet.api.validation import parse_object
from gpufleet.cli.up import demo_objects
from gpufleet.controllers.plane import build_manager
from gpufleet.store.memory import MemoryStore
from gpufleet.twin.clock import VirtualClock
from gpufleet.twin.driver import Runtime
from gpufleet.twin.twin import Twin

EXAMPLES = Path(__file__).parents[2] / "examples"
KINDS = {"TrainingJob", "InferenceService", "Checkpoint", "ModelVersion", "GPUPool", "Queue", "DeviceClass"}
KINDS |= {"ResourceClaimTemplate"}
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
            if isinstance(doc, dict) and doc.get("kind") in KINDS:
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


@pytest.mark.parametrize("seed", [3, 7, 11])
def test_valid_but_odd_objects_never_fail_the_control_plane(seed: int) -> None:
    rng = random.Random(seed)
    seeds = _seeds()
    n = 0
    for _ in range(8):
        clock = VirtualClock()
        store = MemoryStore(clock=clock.datetime)
        store.apply_many(demo_objects())
        manager = build_manager(store)
        runtime = Runtime(store, clock=clock, participants=[Twin(store, clock=clock), manager])
        for _ in range(12):
            n += 1
            try:
                store.apply(parse_object(_mutated(rng, seeds, n)))
            except GpuFleetError:
                continue  # refused with a reason: what the API is for
        runtime.run_until(clock.now() + 3 * 3600)
        assert manager.contained_failures == 0
