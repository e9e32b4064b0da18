"""`gpufleet top`: GPU use per pool and per queue, from the statuses the controllers keep."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.text import Text

from gpufleet.api.errors import ValidationError
from gpufleet.api.numerals import plain_digits
from gpufleet.cli.client import AuthError, Client
from gpufleet.cli.output import Columns, console, lookup

BAR_WIDTH = 20


def register(app: typer.Typer) -> None:
    app.command("top")(top)


def top(
    nodes: Annotated[
        bool, typer.Option("--nodes", help="Also each node: its GPUs allocated, free and unhealthy (sinfo).")
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep showing it, refreshed.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", metavar="SECONDS", help="Between refreshes, with --watch.", min=0.1)
    ] = 2.0,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")] = "table",
    server: Annotated[str | None, typer.Option("--server", metavar="URL", help="API URL.")] = None,
    token: Annotated[str | None, typer.Option("--token", metavar="TOKEN", help="Bearer token.")] = None,
    state: Annotated[str | None, typer.Option("--state", metavar="DIR", help="State directory.")] = None,
) -> None:
    """GPU utilisation per pool and per queue, with workloads pending and running (and per node)."""
    from gpufleet.cli.control import connect

    if output not in ("table", "json"):
        raise ValidationError(f"must be one of table, json, got {output!r}", field="--output")
    client = connect(server, token, state)
    out = console()
    if output == "json":
        while True:  # with --watch, one JSON object a line per refresh
            sys.stdout.write(json.dumps(_figures(client, nodes=nodes), indent=None if watch else 2) + "\n")
            sys.stdout.flush()
            if not watch:
                return
            time.sleep(interval)
    if not watch:
        out.print(_view(client, nodes=nodes))
        return
    if out.is_terminal:  # redrawn in place until Ctrl-C
        from rich.live import Live

        with Live(_view(client, nodes=nodes), console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(_view(client, nodes=nodes), refresh=True)
    while True:  # piped: one view after another, a blank line between them
        out.print(_view(client, nodes=nodes))
        out.print()
        out.file.flush()
        time.sleep(interval)


def _view(client: Client, *, nodes: bool) -> Group:
    pools = _list_or_none(client, "GPUPool")
    queues = _list_or_none(client, "Queue") or []
    work = (_list_or_none(client, "TrainingJob") or []) + (_list_or_none(client, "InferenceService") or [])
    workloads = (_list_or_none(client, "Workload") or []) if client.has_kind("Workload") else []
    parts = []
    if pools is not None:
        parts.append(pools_table(pools))
    parts.append(queues_table(queues, work, workloads))
    if nodes and client.has_kind("Node"):
        listed = _list_or_none(client, "Node")
        if listed is not None:
            parts.append(nodes_table(listed, _list_or_none(client, "Pod") or []))
    return Group(*parts)


def _figures(client: Client, *, nodes: bool) -> dict[str, Any]:
    """What the view shows, as data: pools, queues and (with --nodes) nodes."""
    pools = _list_or_none(client, "GPUPool")
    queues = _list_or_none(client, "Queue") or []
    work = (_list_or_none(client, "TrainingJob") or []) + (_list_or_none(client, "InferenceService") or [])
    workloads = (_list_or_none(client, "Workload") or []) if client.has_kind("Workload") else []
    figures: dict[str, Any] = {"queues": queue_rows(queues, work, workloads)}
    if pools is not None:
        figures["pools"] = [
            {
                "name": pool["metadata"]["name"],
                "gpuModel": lookup(pool, ".spec.gpuModel"),
                "capacityType": lookup(pool, ".spec.capacityType") or "on-demand",
                "nodes": lookup(pool, ".status.nodes") or 0,
                "readyNodes": lookup(pool, ".status.readyNodes") or 0,
                "gpus": float(lookup(pool, ".status.gpus") or 0),
                "allocatedGpus": float(lookup(pool, ".status.allocatedGpuMilli") or 0) / 1000,
            }
            for pool in pools
        ]
    if nodes and client.has_kind("Node"):
        listed = _list_or_none(client, "Node")
        if listed is not None:
            figures["nodes"] = node_rows(listed, _list_or_none(client, "Pod") or [])
    return figures


def pod_gpus(pod: dict[str, Any]) -> float:
    """The GPUs a pod holds: its GPUs times its share of each, or a MIG instance's slices of seven."""
    spec = pod.get("spec") or {}
    profile = str(spec.get("mig") or "")
    if plain_digits(profile[:1]) and profile[1:2] == "g":
        return int(profile[0]) / 7
    return len(spec.get("gpus") or []) * float(spec.get("gpuMilli") or 1000) / 1000


def nodes_table(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Columns:
    """Per node, as Slurm's sinfo: pool, model, state, GPUs, allocated, free (healthy, unallocated)."""
    table = Columns(
        "NODE",
        "POOL",
        "MODEL",
        "STATE",
        "GPUS",
        "ALLOCATED",
        "FREE",
        "UNHEALTHY",
        title="Nodes",
        right=("GPUS", "ALLOCATED", "FREE", "UNHEALTHY"),
    )
    for row in node_rows(nodes, pods):
        table.add_row(
            row["name"],
            row["pool"] or "-",
            row["gpuModel"] or "-",
            row["state"] + (",Cordoned" if row["cordoned"] else ""),
            str(row["gpus"]),
            _number(row["allocatedGpus"]),
            _number(row["freeGpus"]),
            str(row["unhealthyGpus"]),
        )
    return table


def node_rows(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per node, by name: its GPUs, those its unfinished pods hold, the free ones (healthy, not held)."""
    allocated: dict[str, float] = {}
    for pod in pods:
        node = lookup(pod, ".spec.nodeName")
        if node and lookup(pod, ".status.phase") not in ("Succeeded", "Failed"):
            allocated[str(node)] = allocated.get(str(node), 0.0) + pod_gpus(pod)
    rows = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name, spec, status = node["metadata"]["name"], node.get("spec") or {}, node.get("status") or {}
        gpus = int(spec.get("gpus") or 0)
        unhealthy = len(status.get("unhealthyGpus") or [])
        used = allocated.get(name, 0.0)
        rows.append(
            {
                "name": name,
                "pool": spec.get("pool"),
                "gpuModel": spec.get("gpuModel"),
                "state": str(status.get("phase") or "-"),
                "cordoned": bool(spec.get("unschedulable")),
                "gpus": gpus,
                "allocatedGpus": used,
                "freeGpus": max(0.0, gpus - unhealthy - used),
                "unhealthyGpus": unhealthy,
            }
        )
    return rows


def _list_or_none(client: Client, kind: str) -> list[dict[str, Any]] | None:
    """All objects of a kind, or None when the token may not read them."""
    try:
        return client.list_objects(client.resource_type(kind), None)
    except AuthError:
        return None


def bar(used: float, total: float) -> Text:
    """A utilisation bar with its percentage; green, then yellow, then red as it fills."""
    share = 0.0 if total <= 0 else min(1.0, used / total)
    filled = round(share * BAR_WIDTH)
    style = "green" if share < 0.7 else "yellow" if share < 0.9 else "red"
    return Text.assemble(("█" * filled, style), ("░" * (BAR_WIDTH - filled), "dim"), f" {share * 100:5.1f}%")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def pools_table(pools: list[dict[str, Any]]) -> Columns:
    table = Columns(
        "POOL",
        "MODEL",
        "CAPACITY",
        "NODES",
        "GPUS",
        "ALLOCATED",
        "UTILISATION",
        title="GPU pools",
        right=("NODES", "GPUS", "ALLOCATED"),
    )
    total_gpus = total_used = 0.0
    for pool in pools:
        spec, status = pool.get("spec", {}), pool.get("status", {})
        gpus = float(status.get("gpus", 0))
        used = float(status.get("allocatedGpuMilli", 0)) / 1000
        total_gpus += gpus
        total_used += used
        mode = _sharing_mode(spec.get("sharing") or {})
        table.add_row(
            pool["metadata"]["name"],
            f"{spec.get('gpuModel')}{' (' + mode + ')' if mode else ''}",
            str(spec.get("capacityType", "on-demand")),
            f"{status.get('readyNodes', 0)}/{status.get('nodes', 0)}",
            _number(gpus),
            _number(used),
            bar(used, gpus),
        )
    if len(pools) > 1:
        table.add_row(
            Text("total", style="bold"),
            "",
            "",
            "",
            _number(total_gpus),
            _number(total_used),
            bar(total_used, total_gpus),
        )
    return table


def _sharing_mode(sharing: dict[str, Any]) -> str:
    for key in ("mig", "timeSlicing", "mps"):
        if sharing.get(key):
            return key
    return ""


def usage_by_queue(workloads: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """GPUs charged per queue and flavor by the admitted workloads (their admission's milli-GPU)."""
    usage: dict[str, dict[str, float]] = {}
    for workload in workloads:
        admission = lookup(workload, ".status.admission")
        if lookup(workload, ".status.phase") != "Admitted" or not isinstance(admission, dict):
            continue
        per_flavor = usage.setdefault(str(lookup(workload, ".spec.queue") or "default"), {})
        for flavor, milli in (admission.get("usage") or {}).items():
            per_flavor[flavor] = per_flavor.get(flavor, 0.0) + float(milli) / 1000
    return usage


def queues_table(
    queues: list[dict[str, Any]], work: list[dict[str, Any]], workloads: list[dict[str, Any]] | None = None
) -> Columns:
    """Per queue: its nominal quota, what it uses (of its nominal quota) and its workloads by phase.

    Use is the queue's status when a controller keeps it there, else the sum of admitted workloads.
    """
    table = Columns(
        "QUEUE",
        "PARENT",
        "NOMINAL",
        "IN USE",
        "OF NOMINAL",
        "PENDING",
        "RUNNING",
        "DONE",
        title="Queues",
        right=("NOMINAL", "IN USE", "PENDING", "RUNNING", "DONE"),
    )
    for row in queue_rows(queues, work, workloads):
        nominal, used = sum(row["nominal"].values()), sum(row["inUse"].values())
        table.add_row(
            row["name"],
            row["parent"] or "-",
            _flavors(row["nominal"]),
            _flavors(row["inUse"]),
            bar(used, nominal) if nominal else Text("-"),
            str(row["pending"]),
            str(row["running"]),
            str(row["done"]),
        )
    return table


def queue_rows(
    queues: list[dict[str, Any]], work: list[dict[str, Any]], workloads: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Per queue: parent, nominal quota and GPUs in use per flavor, its jobs and services by phase."""
    admitted = usage_by_queue(workloads or [])
    phases: dict[str, Counter[str]] = {}
    for obj in work:
        queue = str(lookup(obj, ".spec.queue") or "default")
        phases.setdefault(queue, Counter())[str(lookup(obj, ".status.phase") or "Pending")] += 1
    rows = []
    for item in queues:
        name = item["metadata"]["name"]
        quotas = item.get("spec", {}).get("quotas", {})
        usage = item.get("status", {}).get("usage") or admitted.get(name, {})
        counts = phases.get(name, Counter())
        rows.append(
            {
                "name": name,
                "parent": item.get("spec", {}).get("parent"),
                "nominal": {f: float(q.get("nominal", 0)) for f, q in quotas.items()},
                "inUse": {f: float(v) for f, v in usage.items()},
                "pending": counts["Pending"],
                "running": counts["Running"] + counts["Admitted"],
                "done": counts["Succeeded"] + counts["Failed"],
            }
        )
    return rows


def _flavors(amounts: dict[str, float]) -> str:
    if not amounts:
        return "-"
    return ", ".join(f"{_number(v)} {flavor}" for flavor, v in amounts.items())
