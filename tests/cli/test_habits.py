"""kubectl's and Slurm's habits in the CLI, against one `gpufleet up` with its digital twin: output
formats (`-o name`, `-o jsonpath=`), `--sort-by`, several kinds at once, `explain`, `wait`, `--version`,
exit codes, job history and cost.

The tests share one control plane, a minute of fleet time a second, holding `habits.yaml`'s jobs:
`quick` is done within seconds, `long` runs for the whole module, `waiter` cannot start beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.client import Client

from .conftest import Plane, Result, start_plane, stop_plane, wait_for

HERE = Path(__file__).parent
FLEET = str(HERE / "habits-fleet.yaml")
JOBS = str(HERE / "habits.yaml")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    started = start_plane(tmp_path_factory.mktemp("habits") / "state", "--fleet", FLEET, "--time-scale", "60")
    client = Client(started.url, (started.state / "admin-token").read_text().strip())
    try:
        from gpufleet.api.documents import load_objects

        client.apply([obj.to_dict() for obj in load_objects(Path(JOBS))])
        tj = client.resource_type("tj")

        def settled() -> bool:
            phases = {
                obj["metadata"]["name"]: (obj.get("status") or {}).get("phase")
                for obj in client.list_objects(tj, None)
            }
            return phases == {"quick": "Succeeded", "long": "Running", "waiter": "Pending"}

        wait_for(settled, timeout=60, what="quick to finish, long to run and waiter to wait")
        yield started
    finally:
        client.close()
        stop_plane(started)


@pytest.fixture
def state(plane: Plane) -> Path:
    assert plane.process.poll() is None, f"the control plane died:\n{plane.log.read_text()}"
    return plane.state


def test_output_name_and_jsonpath(cli: Callable[..., Result]) -> None:
    names = cli("get", "tj", "-A", "-o", "name", "--sort-by", ".metadata.name")
    assert names.code == 0, names.err
    assert names.out.splitlines() == [
        "trainingjob.gpufleet.io/long",
        "trainingjob.gpufleet.io/quick",
        "trainingjob.gpufleet.io/waiter",
    ]
    template = '{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}'
    rows = cli("get", "tj", "-n", "team-a", "-o", f"jsonpath={template}", "--sort-by", ".metadata.name")
    assert rows.code == 0, rows.err
    assert rows.out == "long\tRunning\nquick\tSucceeded\n"
    one = cli(
        "get", "tj", "long", "-n", "team-a", "-o", "jsonpath={.spec.worker.gpus} {.metadata.labels.size}"
    )
    assert one.out == "8 big"
    every = cli("get", "tj", "-A", "-o", "jsonpath={.items[*].spec.replicas}", "--sort-by", ".spec.replicas")
    assert every.out == "1 1 2"
    admitted = cli(
        "get",
        "tj",
        "long",
        "-n",
        "team-a",
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Admitted")].status}',
    )
    assert admitted.code == 0 and admitted.out == "True", admitted


def test_describe_prints_machine_formats_too(cli: Callable[..., Result]) -> None:
    text = cli("describe", "tj", "long", "-n", "team-a")
    assert text.code == 0 and "Conditions:" in text.out
    as_json = cli("describe", "tj", "long", "-n", "team-a", "-o", "json").json()
    assert as_json["metadata"]["name"] == "long" and as_json["kind"] == "TrainingJob"
    assert cli("describe", "tj", "long", "-n", "team-a", "-o", "name").out == "trainingjob.gpufleet.io/long\n"
    assert cli("describe", "tj", "long", "-n", "team-a", "-o", "jsonpath={.spec.replicas}").out == "1"
    assert cli("describe", "tj", "long", "-n", "team-a", "-o", "wide").code == 2


def test_events_print_machine_formats_too(cli: Callable[..., Result]) -> None:
    listed = cli("events", "-o", "json", "--limit", "5").json()
    assert listed["kind"] == "List" and 0 < len(listed["items"]) <= 5
    assert all(item["kind"] == "Event" for item in listed["items"])
    names = cli("events", "-o", "name", "--limit", "3").out.splitlines()
    assert len(names) == 3 and all(name.startswith("event.gpufleet.io/") for name in names)
    reasons = cli(
        "events", "-n", "team-a", "-o", "jsonpath={.items[*].spec.reason}", "--limit", "200"
    ).out.split()
    assert "Succeeded" in reasons  # `quick` finished
    assert cli("events", "-o", "wide").code == 2


def test_apply_into_a_namespace(cli: Callable[..., Result]) -> None:
    text = "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: placed}\n"
    text += "spec: {queue: team-b, replicas: 2, worker: {gpus: 8}, durationSeconds: 60}\n"
    try:
        applied = cli("apply", "-f", "-", "-n", "team-b", stdin=text)
        assert applied.code == 0 and "trainingjob/team-b/placed created" in applied.out, applied
        assert cli("get", "tj", "placed", "-n", "team-b", "-o", "name").code == 0
        assert cli("get", "tj", "placed", "-n", "default").code == 1
        elsewhere = text.replace("{name: placed}", "{name: placed, namespace: team-a}")
        refused = cli("apply", "-f", "-", "-n", "team-b", stdin=elsewhere)
        assert refused.code == 2 and "not the one -n names (team-b)" in refused.err
        assert cli("get", "tj", "placed", "-n", "team-a").code == 1  # nothing applied
    finally:
        cli("delete", "tj", "placed", "-n", "team-b", "--ignore-not-found")


def test_bad_output_formats_are_usage_errors(cli: Callable[..., Result]) -> None:
    for bad in ("bogus", "jsonpath=", "jsonpath={range .items[*]}{.a}", "jsonpath={.items["):
        result = cli("get", "tj", "-A", "-o", bad)
        assert result.code == 2 and ("--output" in result.err or "jsonpath" in result.err), (bad, result)
        assert result.out == ""


def test_sort_by_numbers_and_missing_fields(cli: Callable[..., Result]) -> None:
    by_replicas = cli("get", "tj", "-A", "--sort-by", "{.spec.replicas}", "-o", "name")
    assert by_replicas.out.splitlines()[-1] == "trainingjob.gpufleet.io/waiter"
    # only `long` has a checkpoint interval: it comes first, the jobs without one after it
    by_checkpoint = cli("get", "tj", "-A", "--sort-by", ".spec.checkpoint.intervalSeconds", "-o", "name")
    assert by_checkpoint.out.splitlines()[0] == "trainingjob.gpufleet.io/long"
    assert len(by_checkpoint.out.splitlines()) == 3
    table = cli("get", "tj", "-A", "--sort-by", ".metadata.name")
    lines = table.out.splitlines()
    assert [line.split()[1] for line in lines[1:]] == ["long", "quick", "waiter"]


def test_several_kinds_and_all(cli: Callable[..., Result]) -> None:
    both = cli("get", "tj,gp", "-A")
    assert both.code == 0, both.err
    assert "trainingjob.gpufleet.io/long" in both.out and "gpupool.gpufleet.io/h100" in both.out
    everything = cli("get", "all", "-n", "team-a")
    assert everything.code == 0, everything.err
    assert "trainingjob.gpufleet.io/long" in everything.out
    assert "pod.gpufleet.io/job-long-worker-0" in everything.out
    assert "waiter" not in everything.out  # team-b's
    names = cli("get", "tj,tj,trainingjobs", "-A", "-o", "name")
    assert len(names.out.splitlines()) == 3  # one kind named three ways lists once
    listed = cli("get", "tj,isvc", "-A", "-o", "json").json()
    assert listed["kind"] == "List" and len(listed["items"]) == 3
    refused = cli("get", "tj,isvc", "long", "-n", "team-a")
    assert refused.code == 2 and "one kind" in refused.err
    unknown = cli("get", "tj,nosuchkind", "-A")
    assert unknown.code == 2 and "nosuchkind" in unknown.err


def run_gpufleet(
    state: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed command's way in, in a process of its own (exit codes as a shell sees them)."""
    environment = {**os.environ, "GPUFLEET_STATE": str(state), **(env or {})}
    environment.pop("GPUFLEET_SERVER", None)
    command = [sys.executable, "-m", "gpufleet.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=60)


def test_exit_codes_are_kubectls(state: Path) -> None:
    missing = run_gpufleet(state, "get", "tj", "nope", "-n", "team-a")
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert run_gpufleet(state, "describe", "tj", "nope", "-n", "team-a").returncode == 1
    usage = run_gpufleet(state, "get", "tj", "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr
    bad_format = run_gpufleet(state, "get", "tj", "-o", "xml")
    assert bad_format.returncode == 2 and "--output" in bad_format.stderr
    assert run_gpufleet(state, "get", "nosuchkind").returncode == 2
    ok = run_gpufleet(state, "get", "tj", "long", "-n", "team-a", "-o", "name")
    assert ok.returncode == 0 and ok.stdout == "trainingjob.gpufleet.io/long\n"


def test_version_and_shell_completion(tmp_path: Path) -> None:
    from gpufleet import __version__

    version = run_gpufleet(tmp_path, "--version")
    assert version.returncode == 0 and version.stdout == f"gpufleet {__version__}\n"
    # The shell is named rather than detected from the process tree, where CI may find only sh.
    named = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = run_gpufleet(tmp_path, "--show-completion", "bash", env=named)
    assert script.returncode == 0 and "_gpufleet_completion" in script.stdout
    env = {"_GPUFLEET_COMPLETE": "complete_bash", "COMP_WORDS": "gpufleet get --sor", "COMP_CWORD": "2"}
    completed = run_gpufleet(tmp_path, "get", env=env)
    assert completed.returncode == 0 and completed.stdout.split() == ["--sort-by"]


def test_explain_prints_each_fields_type_and_description(cli: Callable[..., Result]) -> None:
    from gpufleet.api.crd import openapi_schema
    from gpufleet.api.kinds import BUILTIN_KINDS

    kind = cli("explain", "trainingjobs")
    assert kind.code == 0, kind.err
    assert kind.out.startswith("KIND:     TrainingJob\nVERSION:  gpufleet.io/v1alpha1\n")
    assert "A gang of workers submitted to a queue" in kind.out
    assert "   spec\t<Object> -required-\n" in kind.out
    worker = cli("explain", "tj.spec.worker")
    assert "FIELD:    worker <Object> -required-" in worker.out
    schema = openapi_schema(next(k for k in BUILTIN_KINDS if k.kind == "TrainingJob"))
    for name, field in schema["properties"]["spec"]["properties"]["worker"]["properties"].items():
        assert f"   {name}\t<" in worker.out
        assert " ".join(field["description"].split()[:4]) in " ".join(worker.out.split()), name
    gpus = cli("explain", "tj.spec.worker.gpus")
    assert (
        "FIELD:    gpus <integer>" in gpus.out
        and "Whole GPUs per pod" in gpus.out
        and "At most 72" in gpus.out
    )
    quotas = cli("explain", "gq.spec.quotas")
    assert "<map[string]Object>" in quotas.out and "   nominal\t<number> -required-" in quotas.out
    tree = cli("explain", "gp.spec.sharing", "--recursive")
    assert "   timeSlicing\t<Object>\n      replicas\t<integer>\n" in tree.out
    missing = cli("explain", "tj.spec.wroker")
    assert missing.code == 2 and "'wroker' does not exist in TrainingJob.spec" in missing.err
    assert "worker" in missing.err
    assert cli("explain", "nosuchkind").code == 2


def test_wait_for_conditions_fields_and_deletion(state: Path, cli: Callable[..., Result]) -> None:
    done = cli("wait", "tj", "quick", "-n", "team-a", "--for=condition=Succeeded", "--timeout", "30s")
    assert done.code == 0 and done.out == "trainingjob.gpufleet.io/quick condition met (Succeeded=True)\n"
    running = cli("wait", "tj", "long", "-n", "team-a", "--for", "jsonpath={.status.phase}=Running")
    assert running.code == 0 and "trainingjob.gpufleet.io/long condition met" in running.out
    every = cli("wait", "tj", "-A", "--all", "--for", "jsonpath=.spec.replicas", "--timeout", "5s")
    assert every.code == 0 and len(every.out.splitlines()) == 3
    started = time.monotonic()
    late = cli("wait", "tj", "waiter", "-n", "team-b", "--for=condition=Admitted", "--timeout", "1s")
    assert (
        late.code == 1 and "timed out waiting for the condition on trainingjob.gpufleet.io/waiter" in late.err
    )
    assert time.monotonic() - started < 10
    assert cli("wait", "tj", "-l", "size=big", "-A", "--for=condition=Admitted", "--timeout", "1").code == 1
    assert cli("wait", "tj", "nope", "-n", "team-a", "--for=condition=Admitted").code == 1  # not found
    assert cli("wait", "tj", "long", "-n", "team-a", "--for=bogus").code == 2
    assert cli("wait", "tj", "long", "-n", "team-a", "--for=delete", "--timeout", "soon").code == 2

    doomed = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: doomed, namespace: team-b}\n"
    )
    doomed += "spec: {queue: team-b, replicas: 1, worker: {gpus: 8}, durationSeconds: 60}\n"
    assert cli("apply", "-f", "-", stdin=doomed).code == 0
    waiting = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "wait", "tj", "doomed", "-n", "team-b", "--for=delete"],
        env={**os.environ, "GPUFLEET_STATE": str(state)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        assert waiting.poll() is None  # it is still there
        assert cli("delete", "tj", "doomed", "-n", "team-b").code == 0
        out, _ = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0 and out == "trainingjob.gpufleet.io/doomed deleted\n"


def test_top_shows_free_gpus_per_node_and_watches(state: Path, cli: Callable[..., Result]) -> None:
    shown = cli("top", "--nodes")
    assert shown.code == 0, shown.err
    nodes = shown.out[shown.out.index("Nodes\n") :].splitlines()
    assert nodes[1].split() == ["NODE", "POOL", "MODEL", "STATE", "GPUS", "ALLOCATED", "FREE", "UNHEALTHY"]
    rows = {line.split()[0]: line.split() for line in nodes[2:]}
    assert set(rows) == {"h100-0", "h100-1"}
    long_node = cli("get", "po", "job-long-worker-0", "-n", "team-a", "-o", "jsonpath={.spec.nodeName}").out
    assert rows[long_node][4:] == ["8", "8", "0", "0"]  # `long` holds all eight
    assert sum(float(row[6]) for row in rows.values()) == 8
    assert "Nodes" not in cli("top").out
    figures = cli("top", "--nodes", "-o", "json").json()
    by_node = {row["name"]: row for row in figures["nodes"]}
    assert by_node[long_node]["allocatedGpus"] == 8 and by_node[long_node]["freeGpus"] == 0
    assert figures["pools"][0]["name"] == "h100" and figures["pools"][0]["gpus"] == 16
    queues = {row["name"]: row for row in figures["queues"]}
    assert queues["team-a"]["nominal"] == {"H100-80GB": 16} and queues["team-b"]["pending"] == 1
    assert "nodes" not in cli("top", "-o", "json").json()
    assert cli("top", "-o", "yaml").code == 2

    sink = state.parent / "top-watch.txt"
    with sink.open("w") as stdout:
        watching = subprocess.Popen(
            [sys.executable, "-m", "gpufleet.cli.main", "top", "--watch", "--interval", "0.5"],
            env={**os.environ, "GPUFLEET_STATE": str(state)},
            stdout=stdout,
            text=True,
        )
    try:  # refreshed, not printed once
        wait_for(lambda: sink.read_text().count("GPU pools") >= 2, timeout=60, what="top to show twice")
        assert watching.poll() is None
    finally:
        watching.terminate()
        watching.wait(timeout=15)


def test_get_watch_prints_changes(state: Path, cli: Callable[..., Result]) -> None:
    sinks = {fmt: state.parent / f"watch-{fmt}.txt" for fmt in ("table", "name")}
    watchers = []
    for fmt, sink in sinks.items():
        with sink.open("w") as stdout:
            watchers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gpufleet.cli.main", "get", "tj", "-n", "team-b", "-w", "-o", fmt],
                    env={**os.environ, "GPUFLEET_STATE": str(state), "COLUMNS": "200"},
                    stdout=stdout,
                    text=True,
                )
            )
    watched = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: watched, namespace: team-b}\n"
    )
    watched += "spec: {queue: team-b, replicas: 1, worker: {gpus: 1}, durationSeconds: 60}\n"
    try:
        wait_for(
            lambda: all("waiter" in sink.read_text() for sink in sinks.values()), timeout=60, what="lists"
        )
        assert cli("apply", "-f", "-", stdin=watched).code == 0
        wait_for(
            lambda: "trainingjob.gpufleet.io/watched" in sinks["name"].read_text(), timeout=60, what="-o name"
        )
        wait_for(lambda: "watched" in sinks["table"].read_text(), timeout=60, what="a table row")
        assert all(w.poll() is None for w in watchers)  # still watching
    finally:
        cli("delete", "tj", "watched", "-n", "team-b", "--ignore-not-found")
        for watcher in watchers:
            watcher.terminate()
            watcher.wait(timeout=15)
    lines = sinks["table"].read_text().splitlines()
    assert lines[0].split()[:2] == ["NAME", "QUEUE"] and lines[1].split()[0] == "waiter"
    assert any(line.split()[0] == "watched" for line in lines[2:])  # rows of changes, no new header
    assert sum(line.startswith("NAME") for line in lines) == 1
    refused = cli("get", "tj,gp", "-w")
    assert refused.code == 2 and "one kind" in refused.err


def test_describe_shows_a_pending_jobs_place_in_its_queue(cli: Callable[..., Result]) -> None:
    def job(name: str, extra: str = "") -> str:
        text = "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\n"
        text += f"metadata: {{name: {name}, namespace: team-b}}\n"
        return (
            text + f"spec: {{queue: team-b, replicas: 2, worker: {{gpus: 8}}, durationSeconds: 60{extra}}}\n"
        )

    def position(name: str) -> str:
        out = cli("describe", "tj", name, "-n", "team-b").out
        return next((line for line in out.splitlines() if line.startswith("Queue position:")), "")

    # (jobs of earlier tests may take a moment to leave the queue)
    wait_for(lambda: "1 of 1 pending in queue team-b" in position("waiter"), timeout=30, what="waiter alone")
    assert cli("apply", "-f", "-", stdin=job("second")).code == 0
    try:
        wait_for(lambda: "2 of 2" in position("second"), timeout=30, what="second to wait behind waiter")
        assert "1 of 2" in position("waiter")
        assert cli("apply", "-f", "-", stdin=job("urgent", ", priorityClass: production-training")).code == 0
        wait_for(lambda: "1 of 3" in position("urgent"), timeout=30, what="a higher priority to go first")
        assert "2 of 3" in position("waiter") and "3 of 3" in position("second")
        assert position("long") == ""  # team-a's, running: no place in a queue
    finally:
        cli("delete", "tj", "second", "urgent", "-n", "team-b", "--ignore-not-found")


def test_history_accounts_for_finished_jobs(cli: Callable[..., Result]) -> None:
    table = cli("history")
    assert table.code == 0, table.err
    header, *rows = table.out.splitlines()
    assert header.split()[:6] == ["NAMESPACE", "NAME", "QUEUE", "STATE", "GPUS", "NODES"]
    assert "GPU-HOURS" in header and "COST" in header and "QUEUED" in header and "RESTARTS" in header
    assert [row.split()[1] for row in rows] == ["quick"]  # only finished jobs
    quick = cli("history", "-o", "json").json()["items"][0]
    assert quick["state"] == "Succeeded" and quick["gpus"] == 2 and quick["queue"] == "team-a"
    assert quick["nodes"] and quick["nodes"][0].startswith("h100-") and quick["pool"] == "h100"
    # the job computes a minute of fleet time; it ends within a few seconds of that
    assert 60 <= quick["elapsedSeconds"] < 120, quick
    assert quick["gpuHours"] == pytest.approx(2 * quick["elapsedSeconds"] / 3600)
    assert quick["cost"] == pytest.approx(2.5 * quick["gpuHours"])
    assert quick["queuedSeconds"] is not None and quick["queuedSeconds"] >= 0

    everything = cli("history", "--all", "-o", "json").json()["items"]
    states = {item["name"]: item["state"] for item in everything}
    assert states == {"quick": "Succeeded", "long": "Running", "waiter": "Pending"}
    waiter = next(item for item in everything if item["name"] == "waiter")
    assert waiter["gpuHours"] == 0 and waiter["nodes"] == [] and waiter["queuedSeconds"] is None
    assert [item["name"] for item in cli("history", "-a", "-q", "team-b", "-o", "json").json()["items"]] == [
        "waiter"
    ]
    assert cli("history", "-n", "team-b").code == 0  # nothing finished there: said on stderr
    assert cli("history", "-o", "yaml").code == 2


def test_cost_per_queue_and_pool(cli: Callable[..., Result]) -> None:
    jobs = {item["name"]: item for item in cli("history", "--all", "-o", "json").json()["items"]}
    answer = cli("cost", "-o", "json").json()
    team_a = answer["queues"]["team-a"]
    # `long` runs on: its GPU-hours grow between the two reads
    assert team_a["gpuHours"] >= jobs["quick"]["gpuHours"] + jobs["long"]["gpuHours"]
    assert team_a["cost"] == pytest.approx(2.5 * team_a["gpuHours"])
    assert answer["queues"]["team-b"]["gpuHours"] == 0
    pool = answer["pools"]["h100"]
    assert pool["gpuHours"] == pytest.approx(team_a["gpuHours"])
    status = cli("get", "gp", "h100", "-o", "json").json()["status"]
    assert pool["idleGpuHours"] <= status["idleGpuHours"] and pool["idleGpuHours"] > 0
    assert pool["idleCost"] == pytest.approx(2.5 * pool["idleGpuHours"], abs=0.01)  # both rounded
    table = cli("cost")
    assert table.code == 0 and "Per queue" in table.out and "Per pool" in table.out
    assert "IDLE GPU-H" in table.out and "team-b" in table.out


def test_help_names_values_never_python_types() -> None:
    """Every command's help, the kube group's included: `--port PORT`, `KIND`, not `<int>`, `<str>`."""
    import typer

    from gpufleet.cli.main import build_app

    root = typer.main.get_command(build_app())
    seen = []

    def walk(command: Any, parent: Any, name: str) -> None:
        ctx = type(root.make_context("gpufleet", [], resilient_parsing=True))(
            command, info_name=name, parent=parent
        )
        text = command.get_help(ctx)
        seen.append(name)
        for python_type in ("<str>", "<int>", "<float>", "<list[", "<Path>", "<bool>"):
            assert python_type not in text, f"{ctx.command_path}: {python_type} in\n{text}"
        # typer's own copy of click in newer releases: its groups are not click's class
        for child_name, child in getattr(command, "commands", {}).items():
            walk(child, ctx, child_name)

    walk(root, None, "gpufleet")
    assert {"get", "wait", "explain", "history", "cost", "drain", "up", "scheduler"} <= set(seen)
    get_help = root.get_help(root.make_context("gpufleet", [], resilient_parsing=True))
    assert "--version" in get_help


def test_cordon_uncordon_and_drain(cli: Callable[..., Result]) -> None:
    """Last of the module: draining restarts `long` elsewhere."""
    keeper = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: keeper, namespace: team-a}\n"
    )
    keeper += (
        "spec: {queue: team-a, replicas: 1, worker: {gpus: 2}, durationSeconds: 360000, preemptible: false}\n"
    )
    assert cli("apply", "-f", "-", stdin=keeper).code == 0
    try:

        def node_of(pod: str) -> str:
            return cli("get", "po", pod, "-n", "team-a", "-o", "jsonpath={.spec.nodeName}").out

        wait_for(lambda: node_of("job-keeper-worker-0"), timeout=30, what="keeper to be placed")
        node = node_of("job-keeper-worker-0")
        assert cli("cordon", node).out == f"node/{node} cordoned\n"
        assert cli("cordon", node).out == f"node/{node} already cordoned\n"
        nodes = cli("get", "no", node)
        assert "Ready,SchedulingDisabled" in nodes.out
        assert cli("get", "no", node, "-o", "jsonpath={.spec.unschedulable}").out == "true"
        assert cli("uncordon", node).out == f"node/{node} uncordoned\n"
        assert cli("get", "no", node, "-o", "jsonpath={.spec.unschedulable}").out == "false"

        refused = cli("drain", node)
        assert refused.code == 1 and "team-a/job-keeper-worker-0" in refused.err and "--force" in refused.err
        assert cli("get", "no", node, "-o", "jsonpath={.spec.unschedulable}").out == "false"  # nothing done
        drained = cli("drain", node, "--force")
        assert drained.code == 0, drained.err
        assert (
            f"node/{node} cordoned" in drained.out
            and "evicting pod team-a/job-keeper-worker-0" in drained.out
        )
        assert drained.out.endswith(f"node/{node} drained\n")
        restarted = cli("get", "tj", "keeper", "-n", "team-a", "-o", "jsonpath={.status.restarts}")
        wait_for(
            lambda: (
                cli("get", "tj", "keeper", "-n", "team-a", "-o", "jsonpath={.status.restarts}").out == "1"
            ),
            timeout=30,
            what=f"keeper to restart after the drain (restarts {restarted.out})",
        )
        on_node = cli(
            "get", "po", "-A", "-o", "jsonpath={range .items[*]}{.spec.nodeName}/{.status.phase} {end}"
        )
        assert f"{node}/Running" not in on_node.out  # nothing runs on the cordoned node
        assert cli("drain", "no-such-node").code == 1
    finally:
        cli("delete", "tj", "keeper", "-n", "team-a")
        for name in cli("get", "no", "-o", "name").out.split():
            cli("uncordon", name.rsplit("/", 1)[1])
