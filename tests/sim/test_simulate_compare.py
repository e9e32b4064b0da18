"""`gpufleet simulate --compare`: configuration files checked with the file and field named, runs on the
same trace side by side; and the gang slowdown the twin applies from where a gang's pods were placed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_simulate_smoke import synthetic_trace
from typer.testing import CliRunner

from gpufleet.api.errors import ValidationError
from gpufleet.sim import compare, jobfleet, jobsim, philly


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("policy: lottery\n", "policy", "gpufleet"),
        ("polcy: fifo\n", "polcy", None),
        ("checkpointInterval: soon\n", "checkpointInterval", "positive duration"),
        ("failures: mttr=2h\n", "failures", "mtbf=DURATION"),
        ("spot: interruptions-per-day=-1\n", "spot", "N >= 0"),
        ("policy: fifo\nqueues: q.yaml\n", "queues", "own queue"),
        ("leastAttainedService: {thresholdsGpuHours: [1]}\n", "leastAttainedService", "policy: las"),
        (
            "policy: las\nleastAttainedService: {thresholdsGpuHours: [4, 2]}\n",
            "thresholdsGpuHours",
            "increasing",
        ),
        ("placement: lucky\n", "placement", "unknown placement policy"),
        ("gangSlowdown: {rack: 0.5}\n", "gangSlowdown", ">= 1"),
        ("gangSlowdown: {rak: 1.3}\n", "gangSlowdown", "one of host, block, rack"),
        ("queues: missing.yaml\n", "queues", "no such file"),
    ],
)
def test_a_bad_configuration_names_its_file_and_field(
    tmp_path: Path, text: str, field: str, says: str
) -> None:
    path = write(tmp_path / "run.yaml", text)
    with pytest.raises(ValidationError, match=says) as caught:
        compare.load_config(path)
    assert str(path) in str(caught.value)
    assert field in str(caught.value)


def test_not_a_mapping_and_repeated_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="mapping of options"):
        compare.load_config(write(tmp_path / "list.yaml", "- policy: fifo\n"))
    a = write(tmp_path / "a.yaml", "name: same\n")
    b = write(tmp_path / "b.yaml", "name: same\npolicy: fifo\n")
    with pytest.raises(ValidationError, match="distinct name"):
        compare.load_configs([a, b])
    upper = write(tmp_path / "upper.yaml", "name: Same\n")
    with pytest.raises(ValidationError, match=r"'Same' is also .*a.yaml's \('same', in other case\)"):
        compare.load_configs([a, upper])


@pytest.mark.parametrize("name", ["../evil", "..", "a/b", "a|b", "x\\y", " lead", "tail.", "tab\\tname"])
def test_a_run_name_that_cannot_be_one_folder_and_table_cell_is_refused(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / "run.yaml", f"name: {name!r}\n".replace("'", '"'))
    with pytest.raises(ValidationError, match="names the run's folder") as caught:
        compare.load_config(path)
    assert f"{path}: field name: run name" in str(caught.value)


def test_a_file_name_that_cannot_name_a_run_asks_for_a_name(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="give the file a `name:`"):
        compare.load_config(write(tmp_path / "a|b.yaml", "policy: fifo\n"))
    assert compare.load_config(write(tmp_path / "run (v2).yaml", "policy: fifo\n")).name == "run (v2)"


def test_a_configuration_sets_the_run_options(tmp_path: Path) -> None:
    write(tmp_path / "q.yaml", "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: vc-a}\n")
    spec = compare.load_config(
        write(
            tmp_path / "tuned.yaml",
            "queues: q.yaml\ncheckpointInterval: 30m\nfailures: mtbf=2h\nplacement: bestfit\n"
            "gangSlowdown: {rack: 1.3, block: 2}\n",
        ),
        seed=7,
    )
    assert spec.name == "tuned" and spec.policy == "gpufleet"
    assert spec.queues == (tmp_path / "q.yaml").resolve()
    assert spec.options.checkpoint_interval == 1800.0 and spec.options.gpu_mtbf_seconds == 7200.0
    assert spec.options.scheduler is not None and spec.options.scheduler.placement == "bestfit"
    assert spec.options.gang_slowdown == {"rack": 1.3, "block": 2.0}
    assert spec.options.seed == 7


def test_compare_runs_every_configuration_on_the_same_trace(tmp_path: Path) -> None:
    from gpufleet.cli.main import app

    trace = synthetic_trace(tmp_path / "trace.csv", 40)
    fifo = write(tmp_path / "fifo.yaml", "policy: fifo\n")
    las = write(tmp_path / "las.yaml", "name: tiresias\npolicy: las\ncheckpointInterval: 10m\n")
    out = tmp_path / "report"
    args = ["simulate", "--trace", str(trace), "--gpus", "32", "--start-day", "0", "--report", str(out)]
    result = CliRunner().invoke(app, [*args, "--compare", str(fifo), str(las)])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text(encoding="utf-8")
    rows = [
        line for line in text.splitlines() if line.startswith("| fifo ") or line.startswith("| tiresias ")
    ]
    assert len(rows) == 2 and all("| 40/40 |" in row for row in rows)
    assert "JCT mean / p50 / p99" in text
    assert (out / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"
    for name in ("fifo", "tiresias"):
        assert "JCT mean / p50 / p99" in (out / name / "report.md").read_text(encoding="utf-8")

    refused = CliRunner().invoke(app, [*args, "--compare", str(fifo), "--policy", "las"])
    assert isinstance(refused.exception, ValidationError)
    assert "--policy belong in the configuration files" in str(refused.exception)


def two_racks(tmp_path: Path) -> list:  # type: ignore[type-arg]
    """Two 8-GPU nodes, each its own rack, in one block."""
    fleet = write(
        tmp_path / "fleet.yaml",
        "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {name: p}\n"
        "spec: {gpuModel: H100-80GB, gpusPerNode: 8, nodes: 2, pricePerGPUHour: 2.0,"
        " topology: {block: b1, racks: 2}}\n",
    )
    return jobfleet.load_pools(fleet)


@pytest.mark.parametrize(("factors", "expected"), [({}, 1000.0), ({"rack": 1.3, "block": 2.0}, 1300.0)])
def test_a_gang_across_racks_runs_slower_by_the_racks_factor(
    tmp_path: Path, factors: dict[str, float], expected: float
) -> None:
    trace_file = write(
        tmp_path / "trace.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,1000,16,16000,aa\n2017-10-01 06:00:00,1000,8,8000,aa\n",
    )
    trace = philly.load(trace_file)
    pools = two_racks(tmp_path)
    queues = jobfleet.fifo_queues(pools)
    options = jobsim.SimOptions(policy="fifo", gang_slowdown=factors)
    result = jobsim.simulate(trace, pools, queues, options=options)
    gang, single = sorted(result.jobs.values(), key=lambda r: r.submit)
    assert gang.end is not None and gang.start is not None
    assert gang.end - gang.start == pytest.approx(expected)
    # One node is one rack: a job on one node is never slowed down.
    assert single.end is not None and single.start is not None
    assert single.end - single.start == pytest.approx(1000.0)


def test_the_example_configurations_load() -> None:
    folder = Path(__file__).resolve().parents[2] / "examples" / "simulate"
    specs = compare.load_configs(sorted(folder.glob("*.yaml")))
    assert {s.policy for s in specs} == {"gpufleet", "fifo", "las"}


def test_compare_as_json_gives_one_object_per_run(tmp_path: Path) -> None:
    import json

    from gpufleet.cli.main import app

    trace = synthetic_trace(tmp_path / "trace.csv", 10)
    fifo = write(tmp_path / "fifo.yaml", "policy: fifo\n")
    mine = write(tmp_path / "mine.yaml", "gangSlowdown: {rack: 1.5}\n")
    args = ["simulate", "--trace", str(trace), "--gpus", "32", "--start-day", "0", "--json"]
    result = CliRunner().invoke(app, [*args, "--compare", str(fifo), str(mine)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(o["run"], o["policy"], o["jobs"], o["finished"]) for o in lines] == [
        ("fifo", "fifo", 10, 10),
        ("mine", "gpufleet", 10, 10),
    ]
    missing = CliRunner().invoke(app, [*args, "--compare"])
    assert isinstance(missing.exception, ValidationError)
    assert "one or more configuration files" in str(missing.exception)
