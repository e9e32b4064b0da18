"""`gpufleet delete`: by name, -f, -l and --all, each one request to the server, all of it or none."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import Plane, Result, start_plane, stop_plane

TREE = """\
apiVersion: gpufleet.io/v1alpha1
kind: Queue
metadata: {name: org}
---
""" + "---\n".join(
    f"apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {{name: {name}, labels: {{tier: {tier}}}}}\n"
    f"spec: {{parent: org}}\n"
    for name, tier in (("team-a", "gold"), ("team-b", "gold"), ("team-c", "bronze"))
)

JOBS = "---\n".join(
    f"apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {{name: {name}, namespace: {ns}}}\n"
    f"spec: {{queue: {queue}, replicas: 1, worker: {{gpus: 8}}}}\n"
    for name, ns, queue in (
        ("a1", "team-a", "team-a"),
        ("a2", "team-a", "team-a"),
        ("b1", "team-b", "team-b"),
    )
)


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Plane]:
    started = start_plane(tmp_path / "state", "--no-runtime")
    yield started
    stop_plane(started)


@pytest.fixture
def state(plane: Plane) -> Path:
    return plane.state


@pytest.fixture
def files(tmp_path: Path, cli: Callable[..., Result]) -> tuple[str, str]:
    tree, jobs = tmp_path / "tree.yaml", tmp_path / "jobs.yaml"
    tree.write_text(TREE)
    jobs.write_text(JOBS)
    for path in (tree, jobs):
        applied = cli("apply", "-f", str(path))
        assert applied.code == 0, applied.err
    return str(tree), str(jobs)


def names(cli: Callable[..., Result], *kind: str) -> set[str]:
    listed = cli("get", *kind, "-o", "json").json()
    return {item["metadata"]["name"] for item in listed["items"]}


def test_delete_f_deletes_a_tree_of_queues_with_its_work(
    cli: Callable[..., Result], files: tuple[str, str]
) -> None:
    tree, jobs = files
    # The file lists the parent first; one request checks the queues against what is left after it.
    refused = cli("delete", "-f", tree)
    assert refused.code != 0 and "submitted to it" in refused.err
    assert names(cli, "gq") == {"org", "team-a", "team-b", "team-c"}  # none deleted
    deleted = cli("delete", "-f", tree, "-f", jobs)
    assert deleted.code == 0, deleted.err
    assert "queue/org deleted" in deleted.out and "trainingjob/team-a/a1 deleted" in deleted.out
    assert names(cli, "gq") == set() and names(cli, "tj", "-A") == set()


def test_a_missing_name_deletes_none_unless_ignored(
    cli: Callable[..., Result], files: tuple[str, str]
) -> None:
    result = cli("delete", "tj", "a1", "nope", "-n", "team-a")
    assert result.code != 0 and "TrainingJob team-a/nope: not found" in result.err
    assert names(cli, "tj", "-A") == {"a1", "a2", "b1"}
    result = cli("delete", "tj", "a1", "nope", "-n", "team-a", "--ignore-not-found")
    assert result.code == 0 and result.out.strip() == "trainingjob/team-a/a1 deleted"
    assert names(cli, "tj", "-A") == {"a2", "b1"}


def test_delete_by_label_and_all(cli: Callable[..., Result], files: tuple[str, str]) -> None:
    refused = cli("delete", "gq", "-l", "tier=gold")  # team-a and team-b still have jobs
    assert refused.code != 0 and names(cli, "gq") == {"org", "team-a", "team-b", "team-c"}
    assert cli("delete", "gq", "-l", "tier=bronze").out.strip() == "queue/team-c deleted"
    deleted = cli("delete", "tj", "--all", "-n", "team-a")
    assert deleted.code == 0 and names(cli, "tj", "-A") == {"b1"}
    assert cli("delete", "tj", "--all", "-A").code == 0 and names(cli, "tj", "-A") == set()
    assert cli("delete", "gq", "--all").code == 0 and names(cli, "gq") == set()
    nothing = cli("delete", "gq", "--all")
    assert nothing.code == 0 and "No queues found" in nothing.err


@pytest.mark.parametrize(
    "args",
    [
        ("delete",),
        ("delete", "tj"),
        ("delete", "tj", "a1", "--all"),
        ("delete", "tj", "a1", "-A"),
        ("delete", "tj", "-f", "x.yaml"),
    ],
)
def test_unclear_requests_are_refused_before_anything_is_deleted(
    cli: Callable[..., Result], files: tuple[str, str], args: tuple[str, ...]
) -> None:
    result = cli(*args)
    assert result.code != 0 and result.err.startswith("error:")
    assert names(cli, "tj", "-A") == {"a1", "a2", "b1"}
