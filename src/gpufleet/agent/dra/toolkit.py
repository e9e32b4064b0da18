"""The driver's common CDI edits, from the NVIDIA Container Toolkit.

A claim's spec injects its devices by their device nodes (`cdi.py`). With the toolkit's common edits
it sets `NVIDIA_VISIBLE_DEVICES=void`, as the toolkit's own specs do, so the legacy runtime hook adds
nothing: the driver's user-space libraries, binaries, firmware and the hooks that link them
(`nvidia-cdi-hook create-symlinks`, `update-ldcache`) are CDI edits of the spec. NVIDIA's DRA driver
gets them from the toolkit's library (nvcdi's common edits); the toolkit's CLI gives the same,
`nvidia-ctk cdi generate` writing a whole spec whose spec-wide `containerEdits` are those edits. They
depend on the installed driver only, so the agent asks once at start (a driver upgrade restarts the
node's pods, the agent's too).

Without the toolkit's CLI (no `nvidia-ctk`, or it fails) the specs carry device nodes and
`NVIDIA_VISIBLE_DEVICES=none`, and the log says so: the NVIDIA runtime's legacy hook, where the node
runs it, then mounts the driver's libraries (and no device).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

NVIDIA_CTK = "nvidia-ctk"
GENERATE_TIMEOUT_SECONDS = 120.0
# The list-valued edits of the CDI spec, the ones the toolkit's common edits use (they set no intelRdt).
EDIT_KEYS = ("env", "deviceNodes", "mounts", "hooks", "additionalGids")

FALLBACK = (
    "CDI specs of claims carry device nodes only, the driver's libraries left to the NVIDIA runtime's "
    "hook (NVIDIA_VISIBLE_DEVICES=none)"
)

log = logging.getLogger("gpufleet.agent.dra")


def common_edits(
    nvidia_ctk: str = NVIDIA_CTK,
    *,
    driver_root: str = "/",
    dev_root: str = "/",
    timeout: float = GENERATE_TIMEOUT_SECONDS,
) -> dict[str, Any] | None:
    """The toolkit's spec-wide container edits for this node's driver; None (and a log line saying
    what containers will lack) when `nvidia_ctk` is empty, not found or fails."""
    if not nvidia_ctk:
        return None
    binary = shutil.which(nvidia_ctk)
    if binary is None:
        log.warning(
            "%s not found (install the NVIDIA Container Toolkit or give --nvidia-ctk): %s",
            nvidia_ctk,
            FALLBACK,
        )
        return None
    command = [
        binary,
        "cdi",
        "generate",
        "--format=json",
        f"--driver-root={driver_root}",
        f"--dev-root={dev_root}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error("%s failed (%s): %s", " ".join(command), exc, FALLBACK)
        return None
    if done.returncode != 0:
        log.error(
            "%s exited %d: %s; %s", " ".join(command), done.returncode, done.stderr.strip()[-500:], FALLBACK
        )
        return None
    try:
        edits = edits_of(json.loads(done.stdout))
    except (ValueError, TypeError) as exc:
        log.error("%s wrote no CDI spec (%s): %s", binary, exc, FALLBACK)
        return None
    log.info("the driver's common CDI edits from %s: %s", binary, {k: len(v) for k, v in edits.items()})
    return edits


def edits_of(spec: Any) -> dict[str, Any]:
    """A CDI spec's spec-wide `containerEdits`, the keys the CDI spec defines, each a list."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("containerEdits", {}), Mapping):
        raise ValueError("containerEdits is not an object")
    edits = spec.get("containerEdits", {})
    out: dict[str, Any] = {}
    for key in EDIT_KEYS:
        if key in edits and edits[key] is not None:
            if not isinstance(edits[key], list):
                raise ValueError(f"containerEdits.{key} is not a list")
            out[key] = edits[key]
    return out
