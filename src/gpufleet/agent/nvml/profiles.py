"""Recorded node profiles: `NodeInfo` (and telemetry) to JSON and back, and the profiles shipped in
`agent/profiles/`.

A profile is what `gpufleet agent inspect --record FILE` writes on a real machine; tests and the digital
twin replay them through `RecordedNvml`. Keys are camelCase; a mistake is a ValidationError naming the
file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, fields
from importlib import resources
from pathlib import Path
from typing import Any

from gpufleet.agent.nvml.devices import Gpu, MigDevice, NodeInfo, Telemetry
from gpufleet.api.documents import read_text
from gpufleet.api.errors import ValidationError

PROFILE_SCHEMA = "gpufleet.io/node-profile/v1"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def node_to_json(node: NodeInfo, *, telemetry: Mapping[str, Telemetry] | None = None) -> dict[str, Any]:
    """The profile form of a node (camelCase keys), optionally with one telemetry reading per device."""

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k) if isinstance(k, int) else _camel(k): convert(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [convert(v) for v in value]
        return value

    out: dict[str, Any] = {"schema": PROFILE_SCHEMA}
    out.update(convert(asdict(node)))
    for gpu in out["gpus"]:
        # Peers are keyed by GPU index; JSON keys are strings.
        gpu["nvlinkPeers"] = {str(k): v for k, v in gpu["nvlinkPeers"].items()}
    if telemetry:
        out["telemetry"] = {
            uuid: {_camel(k): v for k, v in asdict(t).items() if v is not None}
            for uuid, t in telemetry.items()
        }
    return out


def _from_json(cls: type[Any], data: Mapping[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = "".join("_" + c.lower() if c.isupper() else c for c in key)
        if name not in known:
            raise ValidationError(f"unknown field {key!r}", obj=where, field=key)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValidationError(str(exc), obj=where) from exc


def node_from_json(data: Mapping[str, Any], *, where: str = "profile") -> NodeInfo:
    """Parses a profile; raises ValidationError naming the file and field on any mistake."""
    if data.get("schema") != PROFILE_SCHEMA:
        raise ValidationError(f"expected schema {PROFILE_SCHEMA!r}", obj=where, field="schema")
    gpus = []
    for i, raw in enumerate(data.get("gpus", [])):
        raw = dict(raw)
        raw["migDevices"] = tuple(
            _from_json(MigDevice, m, f"{where}: gpus[{i}].migDevices[{j}]")
            for j, m in enumerate(raw.get("migDevices", []))
        )
        raw["nvlinkPeers"] = {int(k): int(v) for k, v in raw.get("nvlinkPeers", {}).items()}
        raw["computeCapability"] = tuple(raw.get("computeCapability", (0, 0)))
        gpus.append(_from_json(Gpu, raw, f"{where}: gpus[{i}]"))
    body = {k: v for k, v in data.items() if k not in ("schema", "gpus", "telemetry", "description")}
    body["gpus"] = tuple(gpus)
    body["pcieAncestors"] = tuple(tuple(row) for row in data.get("pcieAncestors", ()))
    node: NodeInfo = _from_json(NodeInfo, body, where)
    for i, gpu in enumerate(node.gpus):
        if gpu.index != i:
            raise ValidationError(f"GPU at position {i} has index {gpu.index}", obj=where, field=f"gpus[{i}]")
    return node


def telemetry_from_json(data: Mapping[str, Any], *, where: str = "profile") -> dict[str, Telemetry]:
    return {
        uuid: _from_json(Telemetry, values, f"{where}: telemetry.{uuid}")
        for uuid, values in data.get("telemetry", {}).items()
    }


def bundled_profiles() -> list[str]:
    """Names of the recorded profiles shipped with gpufleet (`hgx-h100`, ...)."""
    folder = resources.files("gpufleet.agent") / "profiles"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def read_profile(name_or_path: str | Path) -> dict[str, Any]:
    """The JSON of a profile file, or of a bundled profile given by name."""
    path = Path(name_or_path)
    if path.suffix != ".json" and not path.exists():
        bundled = resources.files("gpufleet.agent") / "profiles" / f"{name_or_path}.json"
        if not bundled.is_file():
            raise ValidationError(
                f"no profile file {str(name_or_path)!r} and no bundled profile of that name; "
                f"bundled: {', '.join(bundled_profiles())}",
                field="profile",
            )
        text = bundled.read_text()
        where = f"profile {name_or_path}"
    else:
        text = read_text(path)  # a file that cannot be read or is not UTF-8: an error naming it
        where = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"not JSON: {exc}", obj=where) from exc
    if not isinstance(data, dict):
        raise ValidationError("a profile is a JSON object", obj=where)
    data["_where"] = where
    return data
