"""`gpufleet suspend tj NAME` and `gpufleet resume tj NAME`: Kueue's stop and resume of a job.

Suspending sets the TrainingJob's `spec.suspend`; the job's controller (in the embedded world and in
the Kubernetes operator alike) stops its workers as a preemption would, releasing their GPUs, and the
job shows phase `Suspended`. Resuming clears it: the job queues again and restarts from its last
checkpoint. The write is a conditional update: a job written meanwhile is read again.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.api.errors import ConflictError, ValidationError
from gpufleet.cli.client import Client
from gpufleet.cli.output import console

SUSPENDABLE = ("TrainingJob", "InferenceService")
"""The kinds with a `spec.suspend`."""

Kind = Annotated[str, typer.Argument(metavar="KIND", help="trainingjob (tj) or inferenceservice (isvc).")]
Name = Annotated[str, typer.Argument(metavar="NAME", help="The job's or service's name.")]
Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: default].")
]
Kubeconfig = Annotated[
    str | None,
    typer.Option("--kubeconfig", metavar="FILE", help="Suspend a cluster's job, through its API server."),
]
Context = Annotated[str | None, typer.Option("--context", metavar="NAME", help="Kubeconfig context.")]
Server = Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")]
Token = Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")]
State = Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")]


def register(app: typer.Typer) -> None:
    app.command("suspend")(suspend)
    app.command("resume")(resume)


def set_suspend(client: Client, kind: str, name: str, namespace: str, value: bool) -> bool:
    """Sets the job's `spec.suspend`; whether that changed anything."""
    rtype = client.resource_type(kind)
    if rtype.kind not in SUSPENDABLE:
        raise ValidationError(
            f"only a {' or '.join(SUSPENDABLE)} can be suspended, not a {rtype.kind}", obj=name, field="kind"
        )
    for _ in range(5):
        obj = client.read(rtype, name, namespace)
        if bool((obj.get("spec") or {}).get("suspend")) == value:
            return False
        body = {key: obj[key] for key in ("apiVersion", "kind", "metadata", "spec")}
        body["spec"] = {**body["spec"], "suspend": value}
        try:
            client.request("PUT", rtype.path(namespace, name), json=body)
        except ConflictError:  # its controller or a user wrote it meanwhile: read it again
            continue
        return True
    raise ConflictError("the job kept changing while it was being written; try again", obj=name)


def _run(
    kind: str,
    name: str,
    namespace: str | None,
    value: bool,
    server: str | None,
    token: str | None,
    state: str | None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> None:
    from gpufleet.cli.control import connect, namespace_of
    from gpufleet.cli.logs import KINDS

    where = namespace_of(namespace, False) or "default"
    if kubeconfig is not None or context is not None:
        changed = _set_in_cluster(kind, name, where, value, kubeconfig, context)
    else:
        changed = set_suspend(connect(server, token, state), kind, name, where, value)
    verb = "suspended" if value else "resumed"
    what = KINDS.get(kind.lower(), kind).lower()
    console().print(f"{what}/{where}/{name} {verb if changed else 'already ' + verb}")


def _set_in_cluster(
    kind: str, name: str, namespace: str, value: bool, kubeconfig: str | None, context: str | None
) -> bool:
    from gpufleet.cli.kube import _transport
    from gpufleet.cli.logs import KINDS
    from gpufleet.kube.suspend import set_suspend as set_in_cluster

    found = KINDS.get(kind.lower())
    if found not in SUSPENDABLE:
        raise ValidationError(
            f"only a {' or '.join(SUSPENDABLE)} can be suspended, not {kind!r}", obj=name, field="kind"
        )
    return set_in_cluster(_transport(kubeconfig, context), found, namespace, name, value)


def suspend(
    kind: Kind,
    name: Name,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Stops a job and releases its GPUs, as a preemption would, until it is resumed."""
    _run(kind, name, namespace, True, server, token, state, kubeconfig, context)


def resume(
    kind: Kind,
    name: Name,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Queues a suspended job again; it restarts from its last checkpoint."""
    _run(kind, name, namespace, False, server, token, state, kubeconfig, context)
