"""The openb loader: good rows, and errors that name the file, the line and the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.api.errors import DataError
from gpufleet.fleet.request import GpuKind
from gpufleet.sim.datasets import OPENB_DIR, data_dir, resolve_trace
from gpufleet.sim.openb import load_nodes, load_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_pods_of_every_shape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "p0,1000,2048,0,0,,LS,Running\n"
        + "p1,2000,4096,1,500,T4|P100,BE,Running\n"
        + "p2,4000,8192,2,1000,,LS,Failed\n"
        + "p3,1000,1024,1,1000,H100,LS,Running\n",
    )
    pods = load_pods(path)
    assert [p.request.kind for p in pods] == [GpuKind.NONE, GpuKind.SHARE, GpuKind.WHOLE, GpuKind.WHOLE]
    assert pods[1].request.gpu_models == ("T4", "P100") and pods[1].request.gpu_milli == 500
    assert pods[2].request.gpus == 2
    # A model no node has is not an error: the pod just never fits.
    assert pods[3].request.gpu_models == ("H100",)


def test_multigpu_files_have_only_five_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,8,1000\n")
    assert load_pods(path)[0].request.gpus == 8


@pytest.mark.parametrize(
    ("row", "line", "field"),
    [
        ("p1,abc,1,0,0,,LS,Running", 3, "cpu_milli"),
        ("p1,1,1,2,500,,LS,Running", 3, "num_gpu"),
        ("p1,1,1,1,0,,LS,Running", 3, "gpu_milli"),
        ("p1,1,-5,0,0,,LS,Running", 3, "memory_mib"),
        ("p1,1,1", 3, "num_gpu"),
    ],
)
def test_bad_pod_rows_name_file_line_and_field(tmp_path: Path, row: str, line: int, field: str) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "p0,1,1,0,0,,LS,Running\n" + row + "\n")
    with pytest.raises(DataError) as err:
        load_pods(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)
    assert f"{path}:{line}" in str(err.value)


def test_missing_column_is_reported_on_the_header(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", "name,cpu_milli,num_gpu,gpu_milli\np0,1,0,0\n")
    with pytest.raises(DataError) as err:
        load_pods(path)
    assert (err.value.line, err.value.field) == (1, "memory_mib")


def test_nodes_drop_cpu_only_ones_and_check_models(tmp_path: Path) -> None:
    header = "sn,cpu_milli,memory_mib,gpu,model\n"
    path = write(tmp_path, "nodes.csv", header + "a,32000,1024,0,\nb,64000,2048,2,T4\n")
    nodes = load_nodes(path)
    assert [(n.name, n.gpus, n.gpu_model) for n in nodes] == [("b", 2, "T4")]
    assert len(load_nodes(path, gpu_only=False)) == 2
    bad = write(tmp_path, "bad.csv", header + "c,1,1,4,\n")
    with pytest.raises(DataError) as err:
        load_nodes(bad)
    assert (err.value.line, err.value.field) == (2, "model")


def test_unknown_node_model_names_file_line_and_field(tmp_path: Path) -> None:
    header = "sn,cpu_milli,memory_mib,gpu,model\n"
    path = write(tmp_path, "nodes.csv", header + "a,1,1,8,V100M16\nb,1,1,8,Z9000\n")
    with pytest.raises(DataError) as err:
        load_nodes(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 3, "model")
    assert "unknown GPU model 'Z9000'" in str(err.value)


def test_pod_gpu_spec_must_name_gpu_models(tmp_path: Path) -> None:
    # A known model no node has is fine (the pod never fits); a name that is no GPU model is a typo.
    path = write(tmp_path, "pods.csv", POD_HEADER + "p0,1,1,1,1000,B200|T4,LS,Running\n")
    assert load_pods(path)[0].request.gpu_models == ("B200", "T4")
    bad = write(
        tmp_path, "bad.csv", POD_HEADER + "p0,1,1,1,1000,T4,LS,Running\np1,1,1,1,1000,T4|Tee4,LS,Running\n"
    )
    with pytest.raises(DataError) as err:
        load_pods(bad)
    assert (err.value.line, err.value.field) == (3, "gpu_spec") and "'Tee4'" in str(err.value)


def test_every_shipped_openb_file_loads() -> None:
    """Every node and pod list of the data directory loads: each model it names is in the catalogue."""
    folder = data_dir() / OPENB_DIR
    node_lists = sorted(folder.glob("openb_node_list_*.csv"))
    pod_lists = sorted(folder.glob("openb_pod_list_*.csv"))
    if not node_lists or not pod_lists:
        missing = f"no openb trace in {folder} (set GPUFLEET_DATA to the data directory)"
        # CI always has the data directory: there a missing trace is a broken checkout, not a skip.
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    for path in node_lists:
        assert load_nodes(path, gpu_only=False), path
    for path in pod_lists:
        assert load_pods(path), path


def test_trace_names_resolve_in_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    csv_dir = tmp_path / "alibaba-gpu-v2023" / "csv"
    csv_dir.mkdir(parents=True)
    write(csv_dir, "openb_pod_list_tiny.csv", POD_HEADER)
    write(csv_dir, "openb_node_list_gpu_node.csv", "sn,cpu_milli,memory_mib,gpu,model\n")
    monkeypatch.setenv("GPUFLEET_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    files = resolve_trace("tiny")
    assert files.name == "tiny" and files.nodes.name == "openb_node_list_gpu_node.csv"
    assert resolve_trace(str(csv_dir / "openb_pod_list_tiny.csv")).name == "tiny"
    with pytest.raises(DataError, match="known traces: tiny"):
        resolve_trace("nope")
    monkeypatch.delenv("GPUFLEET_DATA")
    assert data_dir(tmp_path / "x") == tmp_path / "x"
    assert data_dir().parts[-2:] == ("shared", "data")
