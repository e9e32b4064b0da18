"""Tables as kubectl prints them: plain columns when not a terminal, messages cut, one line a row."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpufleet.cli.client import Client, ResourceType
from gpufleet.cli.main import build_app
from gpufleet.cli.output import MESSAGE_WIDTH, Columns, objects_table

from .conftest import Plane, start_plane, stop_plane

LONG = "no node has room: " + ", ".join(f"node-{i} [3g.40gb] lacks 2 GPUs" for i in range(20))
API = "/apis/gpufleet.io/v1alpha1"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    started = start_plane(tmp_path_factory.mktemp("tables") / "state", "--no-runtime")
    client = Client(started.url, (started.state / "admin-token").read_text().strip())
    try:
        _fill(client)
    finally:
        client.close()
    yield started
    stop_plane(started)


def _fill(client: Client) -> None:
    node = {"gpuModel": "H100-80GB", "gpus": 8, "pool": "h100"}
    job = {"queue": "default", "replicas": 2, "worker": {"gpus": 8}}
    event = {
        "involvedKind": "TrainingJob",
        "involvedName": "waits",
        "reason": "Pending",
        "time": "2026-01-01T00:00:00Z",
    }
    objects: list[dict[str, Any]] = [
        {"kind": "Node", "metadata": {"name": "h100-0"}, "spec": {**node, "unschedulable": True}},
        {"kind": "Node", "metadata": {"name": "h100-1"}, "spec": node},
        {"kind": "TrainingJob", "metadata": {"name": "waits", "namespace": "team-a"}, "spec": job},
        {
            "kind": "Event",
            "metadata": {"name": "ev", "namespace": "team-a"},
            "spec": {**event, "message": LONG},
        },
    ]
    client.apply([{"apiVersion": "gpufleet.io/v1alpha1", **obj} for obj in objects])
    statuses = {
        f"{API}/nodes/h100-0/status": {
            "phase": "Ready",
            "unhealthyGpus": [{"index": 3, "xid": 79}, {"index": 5, "xid": 48}],
        },
        f"{API}/nodes/h100-1/status": {"phase": "Ready"},
        f"{API}/namespaces/team-a/trainingjobs/waits/status": {
            "phase": "Pending",
            "pendingReason": {"type": "NoFit", "message": LONG},
        },
    }
    for path, status in statuses.items():
        client.request(
            "PATCH", path, json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}
        )


def run(plane: Plane, *args: str) -> list[str]:
    env = {"GPUFLEET_STATE": str(plane.state), "GPUFLEET_SERVER": None, "GPUFLEET_TOKEN": None}
    env.update({"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "COLUMNS": None})
    result = CliRunner().invoke(build_app(), list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def cells(line: str) -> list[str]:
    return re.split(r" {3,}", line.strip())


def test_piped_tables_are_plain_columns_without_padding(plane: Plane) -> None:
    lines = run(plane, "get", "no")
    assert cells(lines[0]) == ["NAME", "STATUS", "POOL", "MODEL", "GPUS", "UNHEALTHY"]
    for line in lines:
        assert line == line.rstrip(), "padded"
        assert "\x1b[" not in line, "colour in a pipe"
    assert max(len(line) for line in lines) < 100
    # Columns start where their headings do: three spaces apart, each as wide as its widest cell.
    starts = [lines[0].index(heading) for heading in ("STATUS", "POOL", "MODEL")]
    for line in lines[1:]:
        assert [line[start - 3 : start] for start in starts] == ["   "] * 3


def test_get_nodes_shows_cordon_and_unhealthy_gpus(plane: Plane) -> None:
    rows = {cells(line)[0]: cells(line) for line in run(plane, "get", "nodes")[1:]}
    assert rows["h100-0"] == ["h100-0", "Ready,SchedulingDisabled", "h100", "H100-80GB", "8", "2"]
    assert rows["h100-1"] == ["h100-1", "Ready", "h100", "H100-80GB", "8", "0"]


def test_long_messages_are_cut_and_a_row_stays_one_line(plane: Plane) -> None:
    lines = run(plane, "get", "tj", "-n", "team-a", "-o", "wide")
    assert len(lines) == 2
    message = lines[1][lines[0].index("MESSAGE") :]
    assert len(message) == MESSAGE_WIDTH and message.endswith("...")
    assert message[:-3].rstrip() in LONG
    events = run(plane, "events", "-n", "team-a")
    assert len(events) == 2 and events[1].endswith("...")
    assert len(events[1][events[0].index("MESSAGE") :]) == MESSAGE_WIDTH
    # describe still shows the whole pending message.
    assert any(LONG in line for line in run(plane, "describe", "tj", "waits", "-n", "team-a"))


def test_top_prints_plain_columns(plane: Plane) -> None:
    lines = run(plane, "top")
    assert lines[0] == "GPU pools"
    assert cells(lines[1]) == ["POOL", "MODEL", "CAPACITY", "NODES", "GPUS", "ALLOCATED", "UTILISATION"]
    queues = lines.index("Queues")
    assert cells(lines[queues + 1])[:3] == ["QUEUE", "PARENT", "NOMINAL"]
    assert all(line == line.rstrip() and "\x1b[" not in line for line in lines)


def test_on_a_terminal_each_row_is_one_line_cut_at_its_width() -> None:
    rtype = ResourceType(
        "TrainingJob",
        "trainingjobs",
        "trainingjob",
        True,
        ("tj",),
        (("Phase", ".status.phase", "string", 0),),
    )
    item = {"metadata": {"name": "waits"}, "status": {"phase": "Pending", "pendingReason": {"message": LONG}}}
    terminal = Console(force_terminal=True, width=60, color_system=None, record=True)
    terminal.print(objects_table(rtype, [item], namespaces=False, wide=True))
    lines = terminal.export_text().splitlines()
    assert len(lines) == 2 and lines[1].startswith("waits") and "Pending" in lines[1]
    assert all(len(line) <= 60 for line in lines) and lines[1].endswith("…")


def test_columns_refuse_a_row_of_the_wrong_length() -> None:
    table = Columns("A", "B")
    with pytest.raises(ValueError):
        table.add_row("only one")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (2.0, "2"),
        (0.5, "0.5"),
        (1e308, "1e+308"),
        (float("inf"), "inf"),
        (123456789012345.0, "123456789012345"),
    ],
)
def test_a_number_cell_stays_short_however_large(value: float, shown: str) -> None:
    from gpufleet.cli.output import cell

    assert cell(value, "number") == shown
