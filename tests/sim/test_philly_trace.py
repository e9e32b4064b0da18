"""The job trace reader (Philly's columns, clear errors for bad rows) and the `--gpus N` fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.api.errors import DataError, ValidationError
from gpufleet.sim import jobfleet, philly

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_jobs_sorted_by_submission_relative_to_the_first(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "2017-10-09 07:01:55,66.0,1,66.0,aa\n2017-10-09 06:13:03,2951.0,2,5902.0,bb\n",
    )
    trace = philly.load(path)
    assert [(j.line, j.submit, j.duration, j.gpus, j.cluster) for j in trace.jobs] == [
        (3, 0.0, 2951.0, 2, "bb"),
        (2, 2932.0, 66.0, 1, "aa"),
    ]
    assert trace.clusters == ["aa", "bb"]
    assert trace.gpu_demand() == {"aa": 66.0, "bb": 5902.0}
    assert [j.name for j in trace.window(100.0, None).jobs] == ["j2"]


def test_times_read_zero_padded_or_not(tmp_path: Path) -> None:
    path = write(tmp_path, "2016-02-29 23:59:59,66.0,1,66.0,aa\n2016-3-1 0:0:9,66.0,1,66.0,aa\n")
    assert [j.submit for j in philly.load(path).jobs] == [0.0, 10.0]


def test_times_read_in_iso_8601_or_as_seconds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "2017-10-09T07:01:55Z,66,1,66,aa\n"
        "2017-10-09T09:01:56+02:00,66,1,66,aa\n"  # 07:01:56 UTC
        "2017-10-09T07:01:57.5,66,1,66,aa\n"  # no offset: UTC
        "1507532520,66,1,66,aa\n",  # seconds since the epoch: 07:02:00 UTC
    )
    assert [j.submit for j in philly.load(path).jobs] == [0.0, 1.0, 2.5, 5.0]
    assert philly.load(path).start == 1507532515.0


def test_a_trace_counting_seconds_from_its_own_start(tmp_path: Path) -> None:
    path = write(tmp_path, "3600,66,1,66,aa\n0,66,2,132,bb\n86400.5,66,1,66,aa\n")
    trace = philly.load(path)
    assert [(j.line, j.submit) for j in trace.jobs] == [(3, 0.0), (2, 3600.0), (4, 86400.5)]


@pytest.mark.parametrize(
    ("row", "field", "says"),
    [
        ("2017-10-09T25:00:00Z,66,1,66,aa", "timestamp", "ISO 8601"),
        ("nan,66,1,66,aa", "timestamp", "1970-01-01"),
        ("-1,66,1,66,aa", "timestamp", "1970-01-01"),
        ("2017-10-09,66,1,66,aa", "timestamp", "YYYY-MM-DD HH:MM:SS"),
        ("2017-02-29 07:01:55,66,1,66,aa", "timestamp", "YYYY-MM-DD HH:MM:SS"),
        ("2017-10-09 24:00:00,66,1,66,aa", "timestamp", "YYYY-MM-DD HH:MM:SS"),
        ("2017-10-09 07:01:55,soon,1,66,aa", "duration", "not a number"),
        ("2017-10-09 07:01:55,-5,1,66,aa", "duration", "positive"),
        ("2017-10-09 07:01:55,66,1.5,66,aa", "num_gpus", "whole number"),
        ("2017-10-09 07:01:55,66,0,66,aa", "num_gpus", "at least 1"),
        ("2017-10-09 07:01:55,66,1" + "0" * 400 + ",66,aa", "num_gpus", "at most 8,388,608"),
        ("2017-10-09 07:01:55,1e308,1,66,aa", "duration", "at most 36,500 days"),
        ("2017-10-09 07:01:55,66,1,66,", "cluster", "empty"),
        ("1969-12-31 23:59:59,66,1,66,aa", "timestamp", "1970-01-01"),
        ("9999-12-31 23:59:59,66,1,66,aa", "timestamp", "before 9000-01-01"),
        ("2017-10-09 07:01:55,66,1,66,a b", "cluster", "cannot name a queue"),
        ("2017-10-09 07:01:55,66,1,66,a/../b", "cluster", "cannot name a queue"),
        ("2017-10-09 07:01:55,66,1,66,-aa", "cluster", "cannot name a queue"),
        ("2017-10-09 07:01:55,66,1,66," + "a" * 61, "cluster", "at most 60"),
        ("2017-10-09 07:01:55,66,1,66,AA", "cluster", "differ only in case"),
        ("2017-10-09 07:01:55,66,1,66,aa,x", "", "row has 6 values, the header 5"),
    ],
)
def test_bad_row_names_file_line_and_column(tmp_path: Path, row: str, field: str, says: str) -> None:
    path = write(tmp_path, "2017-10-09 07:01:55,66.0,1,66.0,aa\n" + row + "\n")
    with pytest.raises(DataError) as caught:
        philly.load(path)
    assert f"{path}:3" in str(caught.value)
    assert field in str(caught.value)
    assert says in str(caught.value)


def test_cluster_ids_of_any_case_and_trailing_empty_values_are_read(tmp_path: Path) -> None:
    path = write(tmp_path, "2017-10-09 07:01:55,66,1,66,aa,,\n2017-10-09 07:01:56,66,1,66,Vc-7\n")
    trace = philly.load(path)
    assert trace.clusters == ["Vc-7", "aa"]
    assert jobfleet.queue_name("Vc-7") == "vc-vc-7"


def test_a_fleet_file_holds_at_most_a_clusters_nodes(tmp_path: Path) -> None:
    pool = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {{name: {name}}}\n"
        "spec: {{gpuModel: H100-80GB, gpusPerNode: 8, nodes: {nodes}{scaling}}}\n"
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(
        pool.format(name="a", nodes=40_000, scaling="")
        + "---\n"
        + pool.format(name="b", nodes=30_000, scaling=""),
        encoding="utf-8",
    )
    with pytest.raises(DataError, match="hold 70,000 nodes together; a simulated fleet holds at most 65,536"):
        jobfleet.load_pools(path)
    path.write_text(pool.format(name="a", nodes=100_000_000, scaling=""), encoding="utf-8")
    with pytest.raises(ValidationError, match=r"spec\.nodes: must be <= 65536"):
        jobfleet.load_pools(path)


def test_a_fleet_file_is_refused_an_autoscaled_pool_and_a_name_given_twice(tmp_path: Path) -> None:
    pool = (
        "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {{name: {name}}}\n"
        "spec: {{gpuModel: H100-80GB, gpusPerNode: 8, nodes: {nodes}{scaling}}}\n"
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(pool.format(name="a", nodes=1, scaling=", autoscaling: {maxNodes: 4}"), encoding="utf-8")
    with pytest.raises(
        DataError, match=r"GPUPool a: field spec\.autoscaling: a simulated fleet keeps its size"
    ):
        jobfleet.load_pools(path)
    path.write_text(
        pool.format(name="a", nodes=1, scaling="") + "---\n" + pool.format(name="a", nodes=2, scaling=""),
        encoding="utf-8",
    )
    with pytest.raises(DataError, match="GPUPool a: the name is given twice"):
        jobfleet.load_pools(path)
    queues = tmp_path / "queues.yaml"
    queue = "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec: {}\n"
    queues.write_text(queue + "---\n" + queue, encoding="utf-8")
    with pytest.raises(DataError, match="Queue q: the name is given twice"):
        jobfleet.load_queues(queues)


def test_missing_column_and_unknown_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,duration,cluster\n", encoding="utf-8")
    with pytest.raises(DataError, match="num_gpus"):
        philly.load(path)
    with pytest.raises(DataError, match="known trace names: philly"):
        philly.resolve("alibaba")


def test_philly_found_in_the_data_directory(tmp_path: Path) -> None:
    folder = tmp_path / "philly-derived-pollux"
    folder.mkdir()
    (folder / "philly.csv").write_text(HEADER, encoding="utf-8")
    assert philly.resolve("philly", data=tmp_path) == folder / "philly.csv"
    with pytest.raises(DataError, match="not found"):
        philly.resolve("philly", data=tmp_path / "nowhere")


def test_busy_start_skips_a_sparse_beginning(tmp_path: Path) -> None:
    rows = "2017-09-04 10:00:00,60,1,60,aa\n" + "".join(
        f"2017-09-{day:02d} 0{h}:00:00,60,1,60,aa\n" for day in (10, 11, 12) for h in range(8)
    )
    trace = philly.load(write(tmp_path, rows))
    # The first busy day is 2017-09-10, 00:00 UTC: 5 days 14 hours after the first submission.
    assert trace.busy_start() == 5 * 86400 + 14 * 3600


def test_fleet_of_gpus_and_proportional_queues() -> None:
    pools = jobfleet.fleet_of_gpus(2048)
    assert pools[0].spec.nodes == 256 and pools[0].spec.gpus_per_node == 8
    assert pools[0].spec.topology.racks == 8
    with pytest.raises(DataError, match="multiple of 8"):
        jobfleet.fleet_of_gpus(100)
    assert jobfleet.fleet_of_gpus(524_288)[0].spec.nodes == 65_536
    for refused in (0, -8, 524_296, 10**12):
        with pytest.raises(DataError, match="at most 524,288"):
            jobfleet.fleet_of_gpus(refused)
    queues = jobfleet.trace_queues({"a": 3.0, "b": 1.0, "c": 0.0}, pools)
    nominal = {q.name: q.spec.quotas["H100-80GB"].nominal for q in queues if q.spec.parent}
    assert nominal == {"vc-a": 1536, "vc-b": 512, "vc-c": 0}
    assert jobfleet.proportional(10, {"x": 1, "y": 1, "z": 1}) == {"x": 4, "y": 3, "z": 3}
