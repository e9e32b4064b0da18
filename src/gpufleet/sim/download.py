"""`gpufleet data fetch`: public traces downloaded into the user's cache, each file checked by its
SHA-256 before it is kept.

The openb traces (Alibaba cluster-trace-gpu-v2023, the FGD paper's) come from the public repository
alibaba/clusterdata at a fixed commit, so the checksums below stay right; they were taken from copies
byte-identical to the files at that commit (same git blob ids). A file is written to a temporary name
beside its place and renamed there only once its size and checksum match, so an interrupted or
corrupted download leaves nothing that a later run would take for the trace. Files already cached
with the right checksum are not downloaded again.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpufleet.api.errors import DataError
from gpufleet.sim.datasets import OPENB_DIR, cache_dir

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
"""Where GitHub serves a repository's files at a commit: BASE/OWNER/REPO/COMMIT/PATH."""
TIMEOUT_SECONDS = 60.0
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Dataset:
    """Files of one folder of a public repository at one commit, and where they go in a data directory."""

    name: str
    description: str
    repository: str
    commit: str
    folder: str
    target: Path
    files: Mapping[str, tuple[str, int]]
    """File name -> (SHA-256, size in bytes)."""

    def url(self, base_url: str, file: str) -> str:
        return f"{base_url.rstrip('/')}/{self.repository}/{self.commit}/{self.folder}/{file}"


def _listing(text: str) -> dict[str, tuple[str, int]]:
    """File name -> (SHA-256, size) from lines `SHA256 SIZE NAME`."""
    out: dict[str, tuple[str, int]] = {}
    for line in text.split("\n"):
        if line.strip():
            digest, size, name = line.split()
            out[name] = (digest, int(size))
    return out


OPENB = Dataset(
    name="openb",
    description="Alibaba cluster-trace-gpu-v2023 (openb): node and pod lists of the FGD paper",
    repository="alibaba/clusterdata",
    commit="7a6c496e4f4b6ce6150be8f881cb051bf2abff42",
    folder="cluster-trace-gpu-v2023/csv",
    target=OPENB_DIR,
    files=_listing(
        """
5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15  52287 openb_node_list_all_node.csv
2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5  42353 openb_node_list_gpu_node.csv
1bc3fd9ee5c1468ccd018f624d9222746e08d59f963f66b925804734271c0eaa 499765 openb_pod_list_cpu0.csv
8ed554026d041b15ff21ddc104d9a21dbd9a93c496262fa23ef7b5be27e220dc 518687 openb_pod_list_cpu037.csv
747f43247bffc2b0bb081d7f61f0705ca8d390dafc0b647e642c92f3baf3ba1e 525811 openb_pod_list_cpu050.csv
f8a2b031461b54d7b9f06d55473c2371eb3357b78a255c646bdca5e0833a8a2f 537576 openb_pod_list_cpu072.csv
bec1c33fbdde61fd463877534ec79b393aec73e1cbb22d55fab9f166ac480982 554709 openb_pod_list_cpu100.csv
b7e9d8a1a601da84d6e0b4110b19ef5001be5e4796d33e7b82f166ba95161f87 622703 openb_pod_list_cpu200.csv
87bebd4d012faa8305ce1fd82737f51cf03361aac28b75d42e34aa656d7f4ee0 651171 openb_pod_list_cpu235.csv
1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8 575468 openb_pod_list_default.csv
9be2d0efb52e242c32e23dd184cc5fcc1983478c6c9c02cbb6b4b62925c0ffcd 574603 openb_pod_list_gpushare20.csv
d83ce79a4eb6987524bedbb0c65e41aed3a36bf6c1b78b86234c3687a07e1d40 572662 openb_pod_list_gpushare40.csv
d31809628128a1f24491086eda4af3e23882b9213d3ef57a56ee2d1af69492fe 566361 openb_pod_list_gpushare60.csv
2dc7e4cb9480484f08539720b433a9ec9ab5d76b396f3f7557c53a2ff78a7611 579461 openb_pod_list_gpuspec10.csv
d9ec6f6c74fb980cc0b81239470c6353fceea077ea9abd610003b604c7cc2b01 271530 openb_pod_list_multigpu20.csv
a5e479c6444b1d83eef848159cf00c3cfa13441b2d1e2c113c391b91f1cc5b11 277920 openb_pod_list_multigpu30.csv
"""
    ),
)

DATASETS = {known.name: known for known in (OPENB,)}


def dataset(name: str) -> Dataset:
    """A dataset by name; an unknown one is an error listing the known ones."""
    found = DATASETS.get(name)
    if found is None:
        raise DataError(f"unknown dataset; known: {', '.join(DATASETS)}", path=name)
    return found


@dataclass(frozen=True, slots=True)
class Fetched:
    """One file of a fetch: where it is, its size, and whether it was downloaded or already there."""

    path: Path
    size: int
    downloaded: bool


def fetch(
    data: Dataset,
    *,
    dest: Path | None = None,
    base_url: str = DEFAULT_BASE_URL,
    progress: Callable[[Fetched], None] | None = None,
) -> list[Fetched]:
    """Downloads every file of `data` missing from `dest` (default: the user's cache) and checks it.

    Raises DataError naming the file for a download that fails, or whose size or checksum is wrong;
    files fetched before it are kept (each is checked), the bad one is not.
    """
    folder = (dest if dest is not None else cache_dir()) / data.target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create the directory: {exc.strerror}", path=str(folder)) from None
    done: list[Fetched] = []
    for name, (digest, size) in data.files.items():
        path = folder / name
        downloaded = not _matches(path, digest, size)
        if downloaded:
            _download(data.url(base_url, name), path, digest, size)
        item = Fetched(path, size, downloaded)
        done.append(item)
        if progress is not None:
            progress(item)
    return done


def _matches(path: Path, digest: str, size: int) -> bool:
    try:
        if path.stat().st_size != size:
            return False
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest() == digest
    except OSError:
        return False


def _download(url: str, path: Path, digest: str, size: int) -> None:
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as sink:
            got, sha = _copy(url, sink, size, path)
        if got != size or sha != digest:
            raise DataError(
                f"downloaded from {url}: {got} bytes with SHA-256 {sha}, expected {size} bytes with "
                f"SHA-256 {digest}; not kept (a proxy or a changed upstream file?)",
                path=str(path),
            )
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)


def _copy(url: str, sink: BinaryIO, size: int, path: Path) -> tuple[int, str]:
    """Streams `url` into `sink`, at most one byte more than `size`; (bytes, SHA-256) of what came."""
    sha = hashlib.sha256()
    got = 0
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            while got <= size:
                chunk = response.read(min(_CHUNK, size + 1 - got))
                if not chunk:
                    break
                sha.update(chunk)
                sink.write(chunk)
                got += len(chunk)
    except urllib.error.HTTPError as exc:
        raise DataError(f"cannot download {url}: HTTP {exc.code} {exc.reason}", path=str(path)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DataError(f"cannot download {url}: {reason}", path=str(path)) from None
    return got, sha.hexdigest()
