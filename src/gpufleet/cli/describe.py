"""`gpufleet describe KIND NAME`: an object for people: status, why it waits, conditions, events.

The pending reason is printed with its details (quota asked for and left, nodes rejected per filter),
since "why is my job pending?" is the question describe is for.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from gpufleet.api.reasons import indented, pending_lines
from gpufleet.cli.client import AuthError, Client
from gpufleet.cli.output import Columns, age, cell, console


def register(app: typer.Typer) -> None:
    app.command("describe")(describe)


def describe(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="Kind, plural or short name.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The object's name.")],
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: default].")
    ] = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="FORMAT",
            help="text, or the object as yaml, json, name or jsonpath=TEMPLATE.",
        ),
    ] = "text",
    server: Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")] = None,
    token: Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")] = None,
    state: Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")] = None,
) -> None:
    """Shows one object: spec, status, pending reason with its details, conditions and events."""
    from gpufleet.cli.control import connect, namespace_of
    from gpufleet.cli.output import output_format, print_objects

    fmt, argument = output_format(output, allowed=("text", "yaml", "json", "name", "jsonpath=TEMPLATE"))
    client = connect(server, token, state)
    rtype = client.resource_type(kind)
    ns = namespace_of(namespace, False) if rtype.namespaced else None
    obj = client.read(rtype, name, ns)
    if fmt != "text":
        print_objects([obj], fmt, single=True, argument=argument)
        return
    related = _events_of(client, obj)
    console().print(render(obj, related, position=queue_position(client, obj)))


def render(
    obj: dict[str, Any], events: list[dict[str, Any]], *, position: tuple[int, int, str] | None = None
) -> RenderableType:
    """The description of an object and its events (and, pending, its place in its queue)."""
    meta = obj.get("metadata", {})
    status = obj.get("status") or {}
    parts: list[RenderableType] = [_fields(obj, meta, status)]
    reason = status.get("pendingReason")
    if reason:
        parts.append(_pending(reason))
    if position is not None:
        place, count, queue = position
        parts.append(
            Text.assemble(
                ("Queue position: ", "bold"),
                f"{place} of {count} pending in queue {queue} "
                "(by priority, then submission; fair share between users may reorder them)",
            )
        )
    spec = obj.get("spec")
    if spec:
        parts.append(Text("Spec:", style="bold"))
        parts.append(Text(indented(spec)))
    conditions = status.get("conditions") or []
    parts.append(Text("Conditions:", style="bold"))
    parts.append(_conditions(conditions) if conditions else Text("  <none>"))
    parts.append(Text("Events:", style="bold"))
    parts.append(events_table(sort_events(events), with_object=False) if events else Text("  <none>"))
    return Group(*parts)


def _fields(obj: dict[str, Any], meta: dict[str, Any], status: dict[str, Any]) -> Columns:
    table = Columns("FIELD", "VALUE", header=False, cut=(), styles={"FIELD": "bold"})
    table.add_row("Name:", str(meta.get("name")))
    if meta.get("namespace"):
        table.add_row("Namespace:", str(meta["namespace"]))
    table.add_row("Kind:", f"{obj.get('kind')} ({obj.get('apiVersion')})")
    if meta.get("labels"):
        table.add_row("Labels:", ", ".join(f"{k}={v}" for k, v in meta["labels"].items()))
    table.add_row(
        "Created:", f"{meta.get('creationTimestamp', '-')} ({age(meta.get('creationTimestamp'))} ago)"
    )
    if meta.get("deletionTimestamp"):
        table.add_row("Deleting since:", str(meta["deletionTimestamp"]))
    table.add_row(
        "Version:", f"resourceVersion {meta.get('resourceVersion')}, generation {meta.get('generation')}"
    )
    for key, value in status.items():
        if key in ("conditions", "pendingReason") or value in (None, [], {}):
            continue
        label = _words(key) + ":"
        if isinstance(value, dict):
            table.add_row(label, ", ".join(f"{k}={cell(v, 'string')}" for k, v in value.items()))
        else:
            table.add_row(label, cell(value, "string"))
    return table


def _pending(reason: dict[str, Any]) -> RenderableType:
    kind, lines = pending_lines(reason)
    return Group(
        Text.assemble(("Pending: ", "bold yellow"), (kind, "yellow")), *(Text(line) for line in lines)
    )


def _conditions(conditions: list[dict[str, Any]]) -> Columns:
    table = Columns("TYPE", "STATUS", "REASON", "AGE", "MESSAGE", indent="  ")
    for condition in conditions:
        table.add_row(
            str(condition.get("type")),
            str(condition.get("status")),
            cell(condition.get("reason"), "string"),
            age(condition.get("lastTransitionTime")),
            cell(condition.get("message"), "string"),
        )
    return table


def events_table(events: list[dict[str, Any]], *, with_object: bool, header: bool = True) -> Columns:
    """Events (objects of kind Event) as a table, oldest first; messages cut to one line."""
    columns = ("AGE", "TYPE", "REASON", *(["OBJECT"] if with_object else []), "MESSAGE")
    table = Columns(*columns, header=header, indent="  ")
    for event in events:
        spec = event.get("spec", {})
        kind_style = "yellow" if spec.get("type") == "Warning" else ""
        row: list[str | Text] = [
            age(spec.get("time")),
            Text(str(spec.get("type", "")), style=kind_style),
            str(spec.get("reason")),
        ]
        if with_object:
            row.append(f"{str(spec.get('involvedKind', '')).lower()}/{spec.get('involvedName', '')}")
        row.append(str(spec.get("message", "")))
        table.add_row(*row)
    return table


def sort_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        events, key=lambda e: (str(e.get("spec", {}).get("time", "")), e["metadata"].get("name", ""))
    )


def _is_pending(workload: dict[str, Any]) -> bool:
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    return spec.get("active", True) is not False and status.get("phase", "Pending") == "Pending"


def queue_position(client: Client, obj: dict[str, Any]) -> tuple[int, int, str] | None:
    """Where a pending job's, service's or workload's Workload stands among its queue's pending ones
    (1 is next), with how many wait there; None when it is not pending or cannot be read."""
    if not client.has_kind("Workload") or obj.get("kind") not in (
        "TrainingJob",
        "InferenceService",
        "Workload",
    ):
        return None
    meta, spec = obj.get("metadata", {}), obj.get("spec") or {}
    queue = spec.get("queue")
    if not queue:
        return None
    try:
        workloads = client.list_objects(client.resource_type("Workload"), None)
    except AuthError:
        return None
    waiting = [w for w in workloads if (w.get("spec") or {}).get("queue") == queue and _is_pending(w)]
    waiting.sort(
        key=lambda w: (
            -int((w.get("spec") or {}).get("priority") or 0),
            w["metadata"].get("creationTimestamp", ""),
        )
    )
    for place, workload in enumerate(waiting, start=1):
        wmeta, owner = workload["metadata"], (workload.get("spec") or {}).get("owner") or {}
        same_namespace = wmeta.get("namespace") == meta.get("namespace")
        mine = (
            wmeta.get("name") == meta.get("name")
            if obj.get("kind") == "Workload"
            else owner.get("kind") == obj.get("kind") and owner.get("name") == meta.get("name")
        )
        if same_namespace and mine:
            return place, len(waiting), str(queue)
    return None


def _events_of(client: Client, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The Event objects about `obj`, where the server has them and the token may read them."""
    if not client.has_kind("Event"):
        return []
    rtype = client.resource_type("Event")
    meta = obj.get("metadata", {})
    try:
        events = client.list_objects(rtype, meta.get("namespace") if rtype.namespaced else None)
    except AuthError:
        return []
    return [
        event
        for event in events
        if event.get("spec", {}).get("involvedKind") == obj.get("kind")
        and event.get("spec", {}).get("involvedName") == meta.get("name")
    ]


def _words(key: str) -> str:
    """`lostGpuSeconds` -> `Lost gpu seconds`."""
    spaced = "".join(" " + c.lower() if c.isupper() else c for c in key)
    return spaced[:1].upper() + spaced[1:]
