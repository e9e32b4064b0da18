"""`gpufleet logs TARGET`: what happened to a pod, or to every pod of a job or service, as log lines.

In the embedded world the digital twin writes each pod's lifecycle (placed, started, resumed from a
checkpoint, checkpoints written, preempted, failed with an XID...) and the server serves it
(`/v1/logs`); a job's log covers all its attempts. With `--kubeconfig` (or `--context`) the pods of
a cluster are read through the Kubernetes API, as kubectl reads them. `-f` follows: new lines are
printed as they come until the pod, job or service has finished.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.cli.client import Client

KINDS = {
    "pod": "Pod",
    "pods": "Pod",
    "po": "Pod",
    "tj": "TrainingJob",
    "trainingjob": "TrainingJob",
    "trainingjobs": "TrainingJob",
    "isvc": "InferenceService",
    "inferenceservice": "InferenceService",
    "inferenceservices": "InferenceService",
}
PLURALS = {"Pod": "pods", "TrainingJob": "trainingjobs", "InferenceService": "inferenceservices"}
FINISHED = ("Succeeded", "Failed")
POLL_SECONDS = 1.0


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)


def parse_target(target: str) -> tuple[str, str]:
    """(kind, name) of `tj/NAME`, `pod/NAME`, `isvc/NAME` or a bare pod name."""
    kind, sep, name = target.partition("/")
    if not sep:
        return "Pod", target
    if kind.lower() not in KINDS or not name:
        raise ValidationError(
            f"give pod/NAME, tj/NAME or isvc/NAME (or a pod's name), got {target!r}", field="TARGET"
        )
    return KINDS[kind.lower()], name


def logs(
    target: Annotated[
        str, typer.Argument(metavar="TARGET", help="pod/NAME (or NAME), tj/NAME or isvc/NAME.")
    ],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Print new lines as they come.")] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: default].")
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option("--kubeconfig", metavar="FILE", help="Read a cluster's pods through its API server."),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", metavar="NAME", help="Kubeconfig context (a cluster's pods).")
    ] = None,
    server: Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")] = None,
    token: Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")] = None,
    state: Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")] = None,
) -> None:
    """Prints the log of a pod, or of every pod of a job or service (prefixed with the pod)."""
    from gpufleet.cli.control import connect, namespace_of

    kind, name = parse_target(target)
    where = namespace_of(namespace, False) or "default"
    if kubeconfig is not None or context is not None:
        _cluster_logs(kind, name, where, follow=follow, kubeconfig=kubeconfig, context=context)
        return
    client = connect(server, token, state)
    try:
        _embedded_logs(client, kind, name, where, follow=follow)
    finally:
        client.close()


def _embedded_logs(client: Client, kind: str, name: str, namespace: str, *, follow: bool) -> None:
    path = f"/v1/logs/{namespace}/{PLURALS[kind]}/{name}"
    after = 0
    while True:
        page: dict[str, Any] = client.get(path, after=after)
        for item in page["items"]:
            typer.echo(item["line"] if kind == "Pod" else f"[{item['pod']}] {item['line']}")
        after = page["next"]
        if not follow or _finished(client, kind, name, namespace):
            return
        time.sleep(POLL_SECONDS)


def _finished(client: Client, kind: str, name: str, namespace: str) -> bool:
    """Whether nothing more will be written: the object is gone or has finished."""
    try:
        obj = client.read(client.resource_type(kind), name, namespace)
    except NotFoundError:
        return True
    return (obj.get("status") or {}).get("phase") in FINISHED


def _cluster_logs(
    kind: str, name: str, namespace: str, *, follow: bool, kubeconfig: str | None, context: str | None
) -> None:
    from gpufleet.cli.kube import _transport
    from gpufleet.kube import logs as kube_logs
    from gpufleet.kube.client import KubeTransport

    api = _transport(kubeconfig, context)
    assert isinstance(api, KubeTransport)
    pods = kube_logs.pods_of(api, namespace, kind, name)
    if follow and len(pods) > 1:  # one stream at a time, as kubectl follows one pod of a job
        pods = pods[:1]
    for pod in pods:
        for line in kube_logs.read(api, namespace, pod, follow=follow):
            typer.echo(line if kind == "Pod" else f"[{pod}] {line}")
