"""The prepared claims, kept in a JSON file beside the plugin's socket so that a restarted agent answers
prepare and unprepare for claims it prepared before: prepare of a claim in the checkpoint returns what
was prepared (the kubelet retries, and calls again after its own restart), and unprepare after a
restart still finds the claim's spec to remove. Every change is written to a temporary file and
renamed, so a crash leaves the old or the new checkpoint, never half of one.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.agent.dra.cdi import atomic_write
from gpufleet.api.errors import ValidationError

CHECKPOINT_VERSION = 1


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as the kubelet is told of it."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CreatedMig:
    """A MIG instance a claim's prepare created (dynamic MIG), destroyed at its unprepare."""

    device: str
    gpu_uuid: str
    gi_id: int
    ci_id: int
    uuid: str


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    time_sliced: dict[str, int] = field(default_factory=dict)
    """GPU UUID -> the time-slice interval the claim's config set: set again when the node rebooted,
    back to Default at unprepare."""
    mig: tuple[CreatedMig, ...] = ()
    """The MIG instances prepare created for the claim's devices (dynamic MIG)."""


class Checkpoint:
    """The prepared claims by UID, read from `path` at start and written on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = self._read()

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def claims(self) -> dict[str, PreparedClaim]:
        with self._lock:
            return dict(self._claims)

    def put(self, uid: str, claim: PreparedClaim) -> None:
        with self._lock:
            self._claims[uid] = claim
            self._write()

    def remove(self, uid: str) -> None:
        with self._lock:
            if self._claims.pop(uid, None) is not None:
                self._write()

    def _read(self) -> dict[str, PreparedClaim]:
        if not self.path.exists():
            return {}
        where = str(self.path)
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") != CHECKPOINT_VERSION:
                raise ValidationError(
                    f"version {data.get('version')!r} is not {CHECKPOINT_VERSION}", obj=where, field="version"
                )
            return {
                uid: PreparedClaim(
                    namespace=c["namespace"],
                    name=c["name"],
                    devices=tuple(
                        PreparedDevice(
                            requests=tuple(d["requests"]),
                            pool=d["pool"],
                            device=d["device"],
                            cdi_device_ids=tuple(d["cdi_device_ids"]),
                        )
                        for d in c["devices"]
                    ),
                    # absent in checkpoints written before claims' configs were applied
                    time_sliced={str(u): int(i) for u, i in c.get("time_sliced", {}).items()},
                    # absent in checkpoints written before dynamic MIG
                    mig=tuple(CreatedMig(**m) for m in c.get("mig", ())),
                )
                for uid, c in data["claims"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(f"unreadable checkpoint: {exc!r}", obj=where, field="claims") from exc

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": CHECKPOINT_VERSION,
            "claims": {uid: asdict(claim) for uid, claim in sorted(self._claims.items())},
        }
        atomic_write(self.path, json.dumps(data, indent=1))
