"""`gpufleet cordon`, `uncordon` and `drain`: a node out of scheduling and emptied, as kubectl does them.

Cordoning sets the Node's `spec.unschedulable` through the API (a conditional update: a node written
meanwhile is read again). Draining cordons the node, then deletes the pods running or placed there in
one request, all or none: their workloads count it as an eviction, restart from their last checkpoint
and are placed elsewhere. A pod of a workload that may not be preempted (`preemptible: false`) stops
the drain before anything is deleted, unless `--force` says to evict it all the same.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpufleet.api.errors import ConflictError, NotFoundError, ValidationError
from gpufleet.cli.client import Client
from gpufleet.cli.output import console

NodeName = Annotated[str, typer.Argument(metavar="NODE", help="The node (see `gpufleet get nodes`).")]
Server = Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")]
Token = Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")]
State = Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")]
_FINISHED = ("Succeeded", "Failed")


def register(app: typer.Typer) -> None:
    app.command("cordon")(cordon)
    app.command("uncordon")(uncordon)
    app.command("drain")(drain)


def set_unschedulable(client: Client, node: str, value: bool) -> bool:
    """Marks the node (un)schedulable; whether that changed anything."""
    if not client.has_kind("Node"):
        raise ValidationError("this server has no nodes (it runs without the digital twin)", obj=node)
    rtype = client.resource_type("Node")
    for _ in range(5):
        obj = client.read(rtype, node, None)
        if bool((obj.get("spec") or {}).get("unschedulable")) == value:
            return False
        body = {key: obj[key] for key in ("apiVersion", "kind", "metadata", "spec")}
        body["spec"] = {**body["spec"], "unschedulable": value}
        try:
            client.request("PUT", rtype.path(None, node), json=body)
        except ConflictError:  # written meanwhile (the health controller, a pool): read it again
            continue
        return True
    raise ConflictError("the node kept changing while it was being written; try again", obj=f"node/{node}")


def cordon(node: NodeName, server: Server = None, token: Token = None, state: State = None) -> None:
    """Marks a node unschedulable: no new pod is placed on it; its pods keep running."""
    from gpufleet.cli.control import connect

    changed = set_unschedulable(connect(server, token, state), node, True)
    console().print(f"node/{node} {'cordoned' if changed else 'already cordoned'}")


def uncordon(node: NodeName, server: Server = None, token: Token = None, state: State = None) -> None:
    """Marks a node schedulable again."""
    from gpufleet.cli.control import connect

    changed = set_unschedulable(connect(server, token, state), node, False)
    console().print(f"node/{node} {'uncordoned' if changed else 'already uncordoned'}")


def pods_on(client: Client, node: str) -> list[dict[str, Any]]:
    """The pods placed on the node that have not finished."""
    pods = client.list_objects(client.resource_type("Pod"), None)
    return [
        pod
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName") == node
        and (pod.get("status") or {}).get("phase") not in _FINISHED
    ]


def drain(
    node: NodeName,
    force: Annotated[
        bool, typer.Option("--force", help="Evict the pods of workloads that may not be preempted too.")
    ] = False,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Cordons a node and evicts its pods: their jobs restart from their last checkpoint elsewhere."""
    from gpufleet.cli.control import connect

    client = connect(server, token, state)
    if not client.has_kind("Node"):
        raise ValidationError("this server has no nodes (it runs without the digital twin)", obj=node)
    client.read(client.resource_type("Node"), node, None)  # a missing node: not found, before anything
    pods = pods_on(client, node)
    if not force:
        protected = _protected(client, pods)
        if protected:
            raise ConflictError(
                f"cannot evict pods of workloads that may not be preempted: {', '.join(protected)} "
                "(--force evicts them too)",
                obj=f"node/{node}",
            )
    out = console()
    changed = set_unschedulable(client, node, True)
    out.print(f"node/{node} {'cordoned' if changed else 'already cordoned'}")
    if pods:
        refs = [
            {
                "kind": "Pod",
                "metadata": {"name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"]},
            }
            for p in pods
        ]
        for item in client.delete_many(refs, ignore_not_found=True):
            meta = item["object"]["metadata"]
            out.print(f"evicting pod {meta['namespace']}/{meta['name']}")
    out.print(f"node/{node} drained")


def _protected(client: Client, pods: list[dict[str, Any]]) -> list[str]:
    """`namespace/pod` of the pods whose workload says it may not be preempted."""
    if not pods or not client.has_kind("Workload"):
        return []
    rtype = client.resource_type("Workload")
    preemptible: dict[tuple[str, str], bool] = {}
    found = []
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        key = (meta["namespace"], str(spec.get("workload") or ""))
        if key[1] and key not in preemptible:
            try:
                workload = client.read(rtype, key[1], key[0])
            except NotFoundError:  # gone meanwhile: nothing to protect
                preemptible[key] = True
            else:
                preemptible[key] = bool((workload.get("spec") or {}).get("preemptible", True))
        if not preemptible.get(key, True):
            found.append(f"{meta['namespace']}/{meta['name']}")
    return found
