"""Queue tokens of the Kubernetes console, kept in a Secret.

The embedded console gives a queue's token (`gpufleet token create --queue Q`) a view of that queue
alone; its state directory keeps each token's SHA-256 only. The Kubernetes console takes the same
kind of token: `gpufleet kube token create --queue Q` makes one and keeps its digest in the Secret
`gpufleet-console-tokens` of the operator's namespace, one key per token (the digest, 64 hex digits,
a valid Secret key) whose value is the queue's name. One key per token means a token is added with a
merge patch of one key, with no read-modify-write race between two admins, and revoked by removing
its key (`kubectl edit secret`, or a patch setting it to null).

The console reads the Secret through the API server (`read_secret`: the user's kubeconfig needs `get`
on it; a Secret that is not there means no queue tokens), or, inside the cluster, from the files of
the Secret mounted as a volume (`read_dir`: one file per key), so the console's ServiceAccount needs
no access to Secrets at all.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

from gpufleet.api.errors import ValidationError
from gpufleet.api.meta import check_name
from gpufleet.kube.transport import MERGE_PATCH, ApiError, Json, Transport

SECRET_NAME = "gpufleet-console-tokens"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _secret_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/secrets"
    return base if name is None else f"{base}/{name}"


def tokens_of_secret(secret: Json) -> dict[str, str]:
    """{digest: queue} from a Secret's data; keys that are not digests, or values that are not a
    queue's name, are passed over (a Secret edited by hand may hold anything)."""
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            queue = base64.b64decode(str(value), validate=True).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError):
            continue
        if _DIGEST.match(key) and _valid_queue(queue):
            out[key] = queue
    return out


def read_secret(api: Transport, namespace: str, name: str = SECRET_NAME) -> dict[str, str]:
    """The queue tokens in the Secret; {} when there is no such Secret."""
    try:
        secret = api.request("GET", _secret_path(namespace, name))
    except ApiError as exc:
        if exc.status == 404:
            return {}
        raise
    return tokens_of_secret(secret)


def read_dir(path: Path) -> dict[str, str]:
    """The queue tokens of a Secret mounted as a volume: a file per key (the kubelet's own entries,
    `..data` and the like, are not digests and are passed over); {} when the directory is missing."""
    if not path.is_dir():
        return {}
    out = {}
    for entry in sorted(path.iterdir()):
        if _DIGEST.match(entry.name) and entry.is_file():
            queue = entry.read_text(encoding="utf-8").strip()
            if _valid_queue(queue):
                out[entry.name] = queue
    return out


def add_token(api: Transport, namespace: str, digest: str, queue: str, *, name: str = SECRET_NAME) -> None:
    """Keeps a token's digest for `queue` in the Secret, made if it is not there."""
    try:
        check_name(queue)
    except ValueError as exc:
        raise ValidationError(str(exc), field="--queue") from None
    data = {digest: base64.b64encode(queue.encode("utf-8")).decode("ascii")}
    try:
        api.request("PATCH", _secret_path(namespace, name), body={"data": data}, content_type=MERGE_PATCH)
        return
    except ApiError as exc:
        if exc.status != 404:
            raise
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpufleet"},
        },
        "type": "Opaque",
        "data": data,
    }
    try:
        api.request("POST", _secret_path(namespace), body=secret)
    except ApiError as exc:
        if exc.status != 409:
            raise
        # Made meanwhile by another admin's first token: add the key to theirs.
        api.request("PATCH", _secret_path(namespace, name), body={"data": data}, content_type=MERGE_PATCH)


def _valid_queue(queue: str) -> bool:
    try:
        check_name(queue)
    except ValueError:
        return False
    return True
