"""`gpufleet data fetch openb` and where `bench fgd` looks for traces.

The download is served by a local HTTP server laid out as raw.githubusercontent.com is
(OWNER/REPO/COMMIT/PATH), from the copies of the traces beside the repository (linked, not copied).
"""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.api.errors import DataError
from gpufleet.cli.main import app
from gpufleet.sim import datasets
from gpufleet.sim.datasets import OPENB_DIR, cache_dir, data_dirs, resolve_trace
from gpufleet.sim.download import OPENB, fetch

SHARED = data_dirs(None)[0] if not os.environ.get(datasets.DATA_ENV) else Path(os.environ[datasets.DATA_ENV])


def _shared_openb() -> Path:
    folder = SHARED / OPENB_DIR
    if not all((folder / name).is_file() for name in OPENB.files):
        missing = f"the openb traces are not all in {folder}"
        if os.environ.get("CI") == "true":  # CI always has them: a missing one is a broken checkout
            pytest.fail(missing)
        pytest.skip(missing)
    return folder


@dataclass
class Mirror:
    url: str
    root: Path
    requests: list[str] = field(default_factory=list)

    def file(self, name: str) -> Path:
        return self.root / OPENB.repository / OPENB.commit / OPENB.folder / name


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    """An HTTP server holding every openb file where raw.githubusercontent.com has it."""
    shared = _shared_openb()
    root = tmp_path / "mirror"
    served = Mirror("", root)
    folder = served.file("x").parent
    folder.mkdir(parents=True)
    for name in OPENB.files:
        (folder / name).symlink_to(shared / name)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            served.requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()


@pytest.fixture
def fresh_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No traces beside the repository, no GPUFLEET_DATA, and an empty cache; returns the cache."""
    monkeypatch.delenv(datasets.DATA_ENV, raising=False)
    monkeypatch.setattr(datasets, "repo_root", lambda start=None: tmp_path / "clone" / "gpufleet")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return cache_dir()


def test_the_checksums_are_those_of_the_shared_copies() -> None:
    shared = _shared_openb()
    for name, (digest, size) in OPENB.files.items():
        data = (shared / name).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), name


def test_fetch_puts_checked_traces_in_the_cache_where_bench_fgd_finds_them(
    mirror: Mirror, fresh_clone: Path
) -> None:
    result = CliRunner().invoke(app, ["data", "fetch", "openb", "--base-url", mirror.url])
    assert result.exit_code == 0, result.output
    assert len(mirror.requests) == len(OPENB.files)
    assert f"{len(OPENB.files)} files in {fresh_clone / OPENB_DIR}" in result.output
    for name, (digest, _) in OPENB.files.items():
        assert hashlib.sha256((fresh_clone / OPENB_DIR / name).read_bytes()).hexdigest() == digest
    assert not list((fresh_clone / OPENB_DIR).glob(".*part"))

    files = resolve_trace("default")
    assert files.pods == fresh_clone / OPENB_DIR / "openb_pod_list_default.csv"
    assert files.nodes == fresh_clone / OPENB_DIR / "openb_node_list_gpu_node.csv"

    again = CliRunner().invoke(app, ["data", "fetch", "openb", "--base-url", mirror.url])
    assert again.exit_code == 0 and "fetched" not in again.output
    assert len(mirror.requests) == len(OPENB.files), "files already cached are not downloaded again"


def test_a_file_with_a_wrong_checksum_is_refused_and_not_kept(mirror: Mirror, tmp_path: Path) -> None:
    bad = "openb_pod_list_cpu050.csv"
    served = mirror.file(bad)
    text = served.read_bytes()
    served.unlink()
    changed = text.replace(b"openb-pod-0000", b"openb-pod-9999", 1)  # same size, other bytes
    assert changed != text and len(changed) == len(text)
    served.write_bytes(changed)
    dest = tmp_path / "data"
    with pytest.raises(DataError) as caught:
        fetch(OPENB, dest=dest, base_url=mirror.url)
    message = str(caught.value)
    assert bad in message and "SHA-256" in message and OPENB.files[bad][0] in message
    folder = dest / OPENB_DIR
    assert not (folder / bad).exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")], "no partial download left"
    assert (folder / "openb_node_list_gpu_node.csv").is_file(), "the files checked before it are kept"


def test_a_corrupted_cached_file_is_downloaded_again(mirror: Mirror, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    fetch(OPENB, dest=dest, base_url=mirror.url)
    cached = dest / OPENB_DIR / "openb_pod_list_default.csv"
    cached.write_bytes(b"truncated")
    before = len(mirror.requests)
    done = fetch(OPENB, dest=dest, base_url=mirror.url)
    assert [item.path.name for item in done if item.downloaded] == [cached.name]
    assert len(mirror.requests) == before + 1
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == OPENB.files[cached.name][0]


def test_a_failed_download_names_the_url(mirror: Mirror, tmp_path: Path) -> None:
    mirror.file("openb_node_list_all_node.csv").unlink()
    result = CliRunner().invoke(
        app, ["data", "fetch", "openb", "--dest", str(tmp_path / "d"), "--base-url", mirror.url]
    )
    assert result.exit_code != 0
    assert isinstance(result.exception, DataError)
    assert "HTTP 404" in str(result.exception) and "openb_node_list_all_node.csv" in str(result.exception)


def test_an_unknown_dataset_lists_the_known_ones() -> None:
    result = CliRunner().invoke(app, ["data", "fetch", "philly"])
    assert isinstance(result.exception, DataError) and "known: openb" in str(result.exception)


def test_bench_fgd_in_a_fresh_clone_says_how_to_get_the_traces(fresh_clone: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "fgd", "--seeds", "1"])
    assert isinstance(result.exception, DataError)
    message = str(result.exception)
    assert "gpufleet data fetch openb" in message and str(fresh_clone / OPENB_DIR) in message


def test_traces_are_looked_for_by_option_then_environment_then_beside_the_repository_then_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def trace_dir(name: str) -> Path:
        folder = tmp_path / name / OPENB_DIR
        folder.mkdir(parents=True)
        (folder / "openb_pod_list_t.csv").write_text("name\n")
        (folder / "openb_node_list_gpu_node.csv").write_text("sn\n")
        return tmp_path / name

    names = ("option", "env", "shared/data", "cache/gpufleet/data")
    option, env, beside, cache = (trace_dir(name) for name in names)
    monkeypatch.setattr(datasets, "repo_root", lambda start=None: tmp_path / "gpufleet")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(datasets.DATA_ENV, str(env))
    assert resolve_trace("t", option).pods.parent == option / OPENB_DIR
    assert resolve_trace("t").pods.parent == env / OPENB_DIR
    monkeypatch.delenv(datasets.DATA_ENV)
    assert data_dirs() == [beside, cache]
    assert resolve_trace("t").pods.parent == beside / OPENB_DIR
    (beside / OPENB_DIR / "openb_pod_list_t.csv").unlink()
    assert resolve_trace("t").pods.parent == cache / OPENB_DIR
    with pytest.raises(DataError, match="known traces: t"):
        resolve_trace("nope")
