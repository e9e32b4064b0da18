"""CLI commands of the control plane: up, apply, get, describe, delete, top, events, token create.

All but `up` talk to the HTTP API (see `gpufleet.cli.client` for how they find the server and the
token); `up` runs the server and the runtime. Errors print as one line and exit non-zero.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from gpufleet.api.documents import decode_text, load_objects
from gpufleet.api.errors import NotFoundError, ValidationError
from gpufleet.api.resource import Resource
from gpufleet.cli.client import Client, ResourceType
from gpufleet.cli.output import console, lookup, objects_table, output_format, print_objects

Server = Annotated[
    str | None,
    typer.Option(
        "--server", metavar="URL", help="API URL [env GPUFLEET_SERVER; default http://127.0.0.1:8765]."
    ),
]
Token = Annotated[
    str | None,
    typer.Option("--token", metavar="TOKEN", help="Bearer token [env GPUFLEET_TOKEN; default: admin]."),
]
State = Annotated[
    str | None,
    typer.Option(
        "--state", metavar="DIR", help="State directory [env GPUFLEET_STATE; ~/.local/share/gpufleet]."
    ),
]
Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: default].")
]
AllNamespaces = Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")]
Files = Annotated[
    list[str] | None,
    typer.Option("--filename", "-f", metavar="FILE", help="YAML file, directory of them, or - for stdin."),
]


def register(app: typer.Typer) -> None:
    """Adds this area's commands to the gpufleet app."""
    from gpufleet.cli import accounting, cluster, describe, explain, logs, nodes, suspend, top, up, wait

    up.register(app)
    app.command("apply")(apply)
    app.command("get")(get)
    describe.register(app)
    cluster.register(app)
    explain.register(app)
    wait.register(app)
    nodes.register(app)
    suspend.register(app)
    logs.register(app)
    accounting.register(app)
    app.command("delete")(delete)
    top.register(app)
    app.command("events")(events)
    app.command("fault")(fault)
    tokens = typer.Typer(rich_markup_mode=None, help="Access tokens for the API.", no_args_is_help=True)
    tokens.command("create")(token_create)
    app.add_typer(tokens, name="token")


def connect(server: str | None, token: str | None, state: str | None) -> Client:
    return Client.from_options(server=server, token_option=token, state=state)


def namespace_of(namespace: str | None, all_namespaces: bool) -> str | None:
    """The namespace to look in; None means all of them."""
    if all_namespaces:
        return None
    return namespace or os.environ.get("GPUFLEET_NAMESPACE") or "default"


def read_objects(files: list[str]) -> list[Resource]:
    """Every object of the files, validated here first so errors name the file and the document."""
    objects: list[Resource] = []
    for name in files:
        if name == "-":
            buffer = getattr(sys.stdin, "buffer", None)  # None for text put in its place (tests)
            text = sys.stdin.read() if buffer is None else decode_text(buffer.read(), "stdin")
            objects.extend(load_objects(text))
            continue
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
            objects.extend(obj for p in found for obj in load_objects(p))
        elif path.exists():
            objects.extend(load_objects(path))
        else:
            raise ValidationError("no such file", obj=name)
    if not objects:
        raise ValidationError("no objects in " + ", ".join(files))
    return objects


# ------------------------------------------------------------------------------------------ apply


def apply(
    filename: Files = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace", "-n", metavar="NS", help="The namespace of the namespaced objects that name none."
        ),
    ] = None,
    dry_run: Annotated[
        str,
        typer.Option(
            "--dry-run",
            metavar="MODE",
            help="none; client: check the files here only; server: the server checks and reports what "
            "would change, as a real apply, and stores nothing.",
        ),
    ] = "none",
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Creates or updates the objects of YAML files, all of them or none."""
    if dry_run not in DRY_RUN_MODES:
        raise ValidationError(
            f"must be one of {', '.join(DRY_RUN_MODES)}, got {dry_run!r}", field="--dry-run"
        )
    if not filename:
        raise ValidationError("say which file to apply: -f FILE (or -f - for stdin)", field="-f")
    objects = read_objects(filename)
    documents = [obj.to_dict(reveal_secrets=True) for obj in objects]
    if dry_run == "client":  # read and checked above, as the server would; nothing is sent
        _into_namespace(documents, namespace, _locally_namespaced)
        for document in documents:
            console().print(f"{_ref(document)} [bold]checked[/] (client dry run)")
        return
    client = connect(server, token, state)
    _into_namespace(documents, namespace, lambda kind: client.resource_type(kind).namespaced)
    out = console()
    with out.status(f"applying {len(objects)} objects", spinner="dots"):
        results = client.apply(documents, dry_run=dry_run == "server")
    suffix = " (server dry run)" if dry_run == "server" else ""
    for item in results:
        obj = item["object"]
        out.print(f"{_ref(obj)} [bold]{item['action']}[/]{suffix}")


DRY_RUN_MODES = ("none", "client", "server")


def _locally_namespaced(kind: str) -> bool:
    from gpufleet.api.kinds import kind_info

    info = kind_info(kind)
    return info is not None and info.namespaced


def _into_namespace(
    documents: list[dict[str, Any]], namespace: str | None, namespaced: Callable[[str], bool]
) -> None:
    """Puts the namespaced objects that name no namespace into -n's; one naming another is refused."""
    if namespace:
        for document in documents:
            meta = document.setdefault("metadata", {})
            if not namespaced(str(document.get("kind"))):
                continue
            # the loader gives an object that names no namespace `default`: that one takes -n's
            if meta.get("namespace") not in (None, "default", namespace):  # kubectl refuses it too
                raise ValidationError(
                    f"its namespace {meta['namespace']} is not the one -n names ({namespace})",
                    obj=f"{document.get('kind')} {meta['namespace']}/{meta.get('name')}",
                    field="-n",
                )
            meta["namespace"] = namespace


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{str(obj.get('kind', '?')).lower()}/{where}{meta.get('name', '?')}"


# -------------------------------------------------------------------------------------------- get


ALL_KINDS = ("TrainingJob", "InferenceService", "Workload", "Pod")
"""What `get all` lists, like kubectl's `all` category: the work users run, where the server has it."""


def get(
    kind: Annotated[
        str,
        typer.Argument(
            metavar="KIND[,KIND...]",
            help="Kind, plural or short name (trainingjobs, tj, queues, gq...); several with commas "
            "(tj,isvc), or all: jobs, services, workloads and pods.",
        ),
    ],
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="One object's name.")] = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="FORMAT",
            help="table, wide, yaml, json, name, or jsonpath=TEMPLATE ({.items[*].metadata.name}).",
        ),
    ] = "table",
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    selector: Annotated[
        str | None, typer.Option("--selector", "-l", metavar="SELECTOR", help="Label selector.")
    ] = None,
    sort_by: Annotated[
        str | None,
        typer.Option(
            "--sort-by",
            metavar="JSONPATH",
            help="Sort the list by this field (.metadata.creationTimestamp, .status.restarts).",
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="After listing, print each change as it happens.")
    ] = False,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Lists objects of a kind (or of several), or shows one; -w keeps printing their changes."""
    from gpufleet.cli.jsonpath import compile_path, first

    fmt, argument = output_format(output)
    sort_path = compile_path(sort_by, option="--sort-by") if sort_by else None
    if name and all_namespaces:
        raise ValidationError(
            "name one namespace (-n) to get an object by name, not -A", field="--all-namespaces"
        )
    client = connect(server, token, state)
    rtypes = kinds_named(client, kind)
    if name and len(rtypes) > 1:
        raise ValidationError("name one kind to get an object by name", field="KIND")
    if watch and len(rtypes) > 1:
        raise ValidationError("watch one kind at a time", field="--watch")
    found: list[tuple[ResourceType, str | None, list[dict[str, Any]]]] = []
    cursor = "0"
    for rtype in rtypes:
        ns = namespace_of(namespace, all_namespaces) if rtype.namespaced else None
        if name:
            items = [client.read(rtype, name, ns)]
            cursor = str(items[0]["metadata"].get("resourceVersion") or "0")
        else:
            listed = client.get(rtype.path(ns), labelSelector=selector)
            items, cursor = listed["items"], str(listed["metadata"]["resourceVersion"])
        if sort_path is not None:
            items = sort_objects(items, lambda obj: first(sort_path, obj))
        found.append((rtype, ns, items))
    if fmt not in ("table", "wide"):
        print_objects(
            [obj for _, _, items in found for obj in items], fmt, single=bool(name), argument=argument
        )
        if watch:
            _watch(client, found[0][0], found[0][1], name, selector, cursor, fmt, argument)
        return
    out = console()
    for index, (rtype, ns, items) in enumerate(found):
        if not items:
            if len(found) == 1:
                where = f" in namespace {ns}" if rtype.namespaced and ns else ""
                console(stderr=True).print(f"No {rtype.plural} found{where}.")
            continue
        if index and any(f[2] for f in found[:index]):
            out.print()
        table = objects_table(
            rtype,
            items,
            namespaces=rtype.namespaced and ns is None,
            wide=fmt == "wide",
            qualified=len(found) > 1,
        )
        out.print(table)
    if len(found) > 1 and not any(items for _, _, items in found):
        ns = namespace_of(namespace, all_namespaces)
        console(stderr=True).print("No resources found" + (f" in namespace {ns}." if ns else "."))
    if watch:
        _watch(client, found[0][0], found[0][1], name, selector, cursor, fmt, argument)


def _watch(
    client: Client,
    rtype: ResourceType,
    namespace: str | None,
    name: str | None,
    selector: str | None,
    cursor: str,
    fmt: str,
    argument: str,
) -> None:
    """Prints every change to the objects from `cursor` on, until Ctrl-C: a table row each, or the
    object in `fmt` (a jsonpath's text ends in a line break)."""
    out = console()
    while True:
        params = {"watch": "true", "resourceVersion": cursor, "timeoutSeconds": "300"}
        if selector:
            params["labelSelector"] = selector
        for line in client.stream(rtype.path(namespace), **params):
            obj = line.get("object") or {}
            if line.get("type") == "ERROR":  # too far behind the store's history: list again
                listed = client.get(rtype.path(namespace), labelSelector=selector)
                cursor = str(listed["metadata"]["resourceVersion"])
                break
            cursor = str(obj.get("metadata", {}).get("resourceVersion") or cursor)
            if line.get("type") == "BOOKMARK" or (name and obj.get("metadata", {}).get("name") != name):
                continue
            if fmt in ("table", "wide"):
                table = objects_table(
                    rtype, [obj], namespaces=rtype.namespaced and namespace is None, wide=fmt == "wide"
                )
                table.header = False
                out.print(table)
            else:
                print_objects([obj], fmt, single=True, argument=argument)
                if fmt == "jsonpath":
                    sys.stdout.write("\n")
            sys.stdout.flush()


def kinds_named(client: Client, names: str) -> list[ResourceType]:
    """The kinds of `tj`, `tj,isvc` or `all`, in the order named, each once."""
    wanted: list[ResourceType] = []
    for part in names.split(","):
        part = part.strip()
        if not part:
            raise ValidationError(f"an empty kind in {names!r}", field="KIND")
        if part.lower() == "all":
            chosen = [client.resource_type(k) for k in ALL_KINDS if client.has_kind(k)]
        else:
            chosen = [client.resource_type(part)]
        wanted.extend(rtype for rtype in chosen if rtype not in wanted)
    return wanted


def sort_objects(items: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """Items ordered by a field: numbers by value, then everything else as text; those without it last."""

    def order(obj: dict[str, Any]) -> tuple[int, float, str]:
        value = key(obj)
        if value is None:
            return (2, 0.0, "")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (0, float(value), "")
        return (1, 0.0, value if isinstance(value, str) else json.dumps(value, sort_keys=True))

    return sorted(items, key=order)


# ----------------------------------------------------------------------------------------- delete


def delete(
    kind: Annotated[str | None, typer.Argument(metavar="KIND", help="Kind, plural or short name.")] = None,
    names: Annotated[list[str] | None, typer.Argument(metavar="NAME", help="Names of the objects.")] = None,
    filename: Files = None,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", metavar="SELECTOR", help="Every object of KIND with these labels."),
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every object of KIND.")] = False,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    ignore_not_found: Annotated[
        bool, typer.Option("--ignore-not-found", help="Missing is not an error.")
    ] = False,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Deletes objects by kind and name, by label (-l), all of a kind (--all), or those of YAML files:
    all of them or none, in one request."""
    if filename and (kind or selector or everything):
        raise ValidationError("give either -f FILE or KIND NAME (or KIND -l / --all), not both", field="-f")
    if (selector or everything) and names:
        raise ValidationError("give either names or -l / --all, not both", field="NAME")
    if names and all_namespaces:
        raise ValidationError("name one namespace (-n) to delete objects by name, not -A", field="-A")
    if not filename and not (kind and (names or selector or everything)):
        raise ValidationError(
            "say what to delete: KIND NAME..., KIND -l SELECTOR, KIND --all or -f FILE", field="NAME"
        )
    client = connect(server, token, state)
    out = console()
    if filename:
        refs = [_reference(obj.kind, obj.name, obj.namespace) for obj in read_objects(filename)]
    else:
        assert kind is not None
        rtype = client.resource_type(kind)
        ns = namespace_of(namespace, all_namespaces) if rtype.namespaced else None
        if selector or everything:
            with out.status(f"deleting {rtype.plural}", spinner="dots"):
                deleted = client.delete_collection(rtype, ns, selector)
            if not deleted:
                where = f" in namespace {ns}" if rtype.namespaced and ns else ""
                console(stderr=True).print(f"No {rtype.plural} found{where}.")
            _print_deleted(out, deleted)
            return
        refs = [_reference(rtype.kind, name, ns) for name in names or []]
    with out.status(f"deleting {len(refs)} objects", spinner="dots"):
        deleted = client.delete_many(refs, ignore_not_found=ignore_not_found)
    _print_deleted(out, deleted)


def _reference(kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"kind": kind, "metadata": meta}


def _print_deleted(out: Console, deleted: list[dict[str, Any]]) -> None:
    for item in deleted:
        obj = item["object"]
        held = obj.get("metadata", {}).get("finalizers") or []
        done = "deleted" if item["action"] == "deleted" else f"deleting (finalizers: {', '.join(held)})"
        out.print(f"{_ref(obj)} [bold]{done}[/]")


# ----------------------------------------------------------------------------------------- events


def events(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", metavar="NS", help="Namespace [default: all].")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep printing new events.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", metavar="N", help="How many of the latest to show.", min=1)
    ] = 50,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="FORMAT",
            help="table, or the Events as yaml, json, name or jsonpath=TEMPLATE.",
        ),
    ] = "table",
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """What happened lately: admissions, placements, failures, checkpoints, restarts."""
    from gpufleet.cli.describe import events_table, sort_events

    fmt, argument = output_format(output, allowed=("table", "yaml", "json", "name", "jsonpath=TEMPLATE"))
    client = connect(server, token, state)
    out = console()
    if not client.has_kind("Event"):  # a server without the runtime's Event kind: its change log
        if fmt != "table":
            raise ValidationError(
                "this server keeps no Event objects: only the table is shown", field="--output"
            )
        answer = client.get("/v1/changes", namespace=namespace, limit=limit)
        _print_changes(out, answer["items"])
        return
    rtype = client.resource_type("Event")
    listed = client.get(rtype.path(namespace))
    latest = sort_events(listed["items"])[-limit:]
    if fmt != "table":
        print_objects(latest, fmt, single=False, argument=argument)
    elif latest:
        out.print(events_table(latest, with_object=True))
    else:
        console(stderr=True).print(
            "No events yet." + (" Waiting for new ones (Ctrl-C to stop)." if watch else "")
        )
    cursor = listed["metadata"]["resourceVersion"]
    while watch:
        answer = client.get(
            "/v1/changes", kind="Event", namespace=namespace, resourceVersion=cursor, timeoutSeconds=30
        )
        cursor = answer["resourceVersion"]
        new = [change["object"] for change in answer["items"] if change["type"] == "ADDED"]
        if new and fmt != "table":
            for event in sort_events(new):
                print_objects([event], fmt, single=True, argument=argument)
                if fmt == "jsonpath":
                    sys.stdout.write("\n")
            sys.stdout.flush()
        elif new:
            out.print(events_table(sort_events(new), with_object=True, header=False))


def _print_changes(out: Console, changes: list[dict[str, Any]]) -> None:
    for change in changes:
        obj = change["object"]
        phase = lookup(obj, ".status.phase")
        out.print(f"{change['resourceVersion']:>8} {change['type']:<9} {_ref(obj)} {phase or ''}")


# ------------------------------------------------------------------------------------------ token


def token_create(
    queue: Annotated[
        str,
        typer.Option("--queue", "-q", metavar="QUEUE", help="The queue the token may submit to and read."),
    ],
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Creates a token that may only submit to, and read, one queue. It is shown once."""
    client = connect(server, token, state)
    answer = client.request("POST", "/v1/tokens", json={"queue": queue})
    sys.stdout.write(answer["token"] + "\n")
    console(stderr=True).print(
        f"[dim]token for queue {queue}; use it with --token or GPUFLEET_TOKEN (it is not shown again)[/]"
    )


# ------------------------------------------------------------------------------------------ fault

_FAULTS = {
    "gpu-failure": "GpuFailure",
    "gpu-repair": "GpuRepair",
    "node-loss": "NodeLoss",
    "spot-interruption": "SpotInterruption",
}


def fault(
    kind: Annotated[
        str, typer.Argument(metavar="FAULT", help="gpu-failure, gpu-repair, node-loss or spot-interruption.")
    ],
    node: Annotated[str, typer.Argument(metavar="NODE", help="The node (see `gpufleet get nodes`).")],
    gpu: Annotated[
        int | None,
        typer.Option("--gpu", metavar="N", help="The GPU's index, for gpu-failure and gpu-repair."),
    ] = None,
    server: Server = None,
    token: Token = None,
    state: State = None,
) -> None:
    """Makes the digital twin play a fault: what the controllers do about it shows in describe and events."""
    if kind not in _FAULTS:
        raise ValidationError(f"must be one of {', '.join(_FAULTS)}, got {kind!r}", field="KIND")
    # Said here in the command's own words; the API's answer would name its request type.
    if kind in ("gpu-failure", "gpu-repair") and gpu is None:
        raise ValidationError(f"--gpu is required for {kind}")
    if kind not in ("gpu-failure", "gpu-repair") and gpu is not None:
        raise ValidationError(f"{kind} takes the whole node, not one GPU: leave --gpu out", field="--gpu")
    client = connect(server, token, state)
    if gpu is not None and client.has_kind("Node"):
        try:
            spec = client.read(client.resource_type("Node"), node, None).get("spec") or {}
        except NotFoundError:
            spec = {}  # the server says what is wrong: no such node, or no digital twin at all
        count = spec.get("gpus")
        if isinstance(count, int) and gpu >= count:
            have = f"GPUs 0..{count - 1}" if count else "no GPUs"
            raise ValidationError(f"node/{node} has {have}, got {gpu}", field="--gpu")
    body: dict[str, Any] = {"type": _FAULTS[kind], "node": node}
    if gpu is not None:
        body["gpu"] = gpu
    client.request("POST", "/v1/faults", json=body)
    console().print(f"{kind} injected on node/{node}" + (f" GPU {gpu}" if gpu is not None else ""))
