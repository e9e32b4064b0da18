"""CLI command: gpufleet bench throughput — how fast the core places pods and topology-constrained gangs."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.api.errors import ValidationError
from gpufleet.scheduler.placement.policies import get_policy
from gpufleet.sim.throughput import ThroughputConfig, ThroughputResult, run_throughput

# The targets of issue 2 at 5,000 nodes x 8 GPUs on a 2-core machine.
TARGET_PODS_PER_S = 2000.0
TARGET_P99_GANG_MS = 20.0
TARGET_RSS_MIB = 1536.0


def _table(r: ThroughputResult) -> Table:
    table = Table(title=f"Placement throughput: {r.nodes} nodes, {r.gpus} GPUs, policy {r.policy}")
    # Rates count every decision, rejections included: the rejected column says how many there were.
    for header in ("stream", "tried", "placed", "rejected", "per s", "p50 ms", "p99 ms", "p99 cpu"):
        table.add_column(header, justify="left" if header == "stream" else "right")
    table.add_row(
        "1-GPU pods", str(r.pods), str(r.pods_placed), str(r.pods_rejected), f"{r.pods_per_s:,.0f}",
        f"{r.p50_pod_ms:.3f}", f"{r.p99_pod_ms:.3f}", f"{r.p99_pod_cpu_ms:.3f}",
    )  # fmt: skip
    table.add_row(
        "gangs", str(r.gangs), f"{r.gangs_placed}", str(r.gangs_rejected),
        f"{r.gangs_per_s:,.0f}", f"{r.p50_gang_ms:.2f}", f"{r.p99_gang_ms:.2f}", f"{r.p99_gang_cpu_ms:.2f}",
    )  # fmt: skip
    table.add_row("  rack", "", "", "", "", "", f"{r.p99_rack_gang_ms:.2f}")
    table.add_row("  block", "", "", "", "", "", f"{r.p99_block_gang_ms:.2f}")
    table.add_row("  33-64 pods", "", "", "", "", "", f"{r.p99_gang_33_64_ms:.2f}")
    table.add_row(
        "share pods", str(r.share_pods), str(r.share_placed), str(r.share_rejected), f"{r.share_per_s:,.0f}",
        "", f"{r.p99_share_ms:.3f}", f"{r.p99_share_cpu_ms:.3f}",
    )  # fmt: skip
    table.caption = (
        f"{r.placed_total:,} pods placed ({r.gang_pods_placed:,} in gangs), "
        f"at most {r.peak_resident_pods:,} at once; "
        f"peak RSS {r.peak_rss_mib:,.0f} MiB; wall {r.wall_s:.1f} s. Targets at 5,000 nodes: "
        f"{TARGET_PODS_PER_S:,.0f} pods/s, gang p99 {TARGET_P99_GANG_MS:.0f} ms, "
        f"RSS {TARGET_RSS_MIB:,.0f} MiB"
    )
    return table


def throughput(
    nodes: int = typer.Option(5000, min=1, help="Nodes in the synthetic fleet."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per node (one NVLink domain)."),
    pods: int | None = typer.Option(
        None, min=0, help="Single-GPU pods in the first stream (default: 10 per node, 50,000 at 5,000 nodes)."
    ),
    gangs: int | None = typer.Option(
        None,
        min=0,
        help="Gangs of 2 to 64 whole-node pods (rack or block topology) (default: 0.4 per node, 2,000 at "
        "5,000 nodes).",
    ),
    share_pods: int | None = typer.Option(
        None,
        "--share-pods",
        min=0,
        help="GPU-share pods in the last stream; a random one leaves once 6 per node run (default: 10 per "
        "node, 50,000 at 5,000 nodes).",
    ),
    seed: int = typer.Option(0, help="Random seed; the same seed gives the same decisions."),
    policy: str | None = typer.Option(
        None,
        help="One scoring policy for every stream. Not given: the scheduler's default for each stream's "
        "workload class (single and share pods batch, gangs training), as users get it.",
    ),
    json_out: bool = typer.Option(False, "--json", help="One JSON object on stdout instead of the table."),
) -> None:
    """Places streams of single pods, gangs and share pods on a synthetic fleet; reports rates, rejections,
    latency percentiles and peak memory. Streams not given scale with --nodes (see each option's default)."""
    try:
        if policy is not None:
            get_policy(policy)  # an unknown name fails here, listing the valid ones
    except ValueError as exc:  # a policy that needs settings this benchmark cannot give (fgd's workload)
        raise ValidationError(f"policy {policy!r} cannot run here: {exc}", field="--policy") from exc
    if nodes < 1:
        raise ValidationError("must be at least 1", field="--nodes")
    config = ThroughputConfig.for_fleet(
        nodes, pods=pods, gangs=gangs, share_pods=share_pods, gpus_per_node=gpus_per_node, seed=seed,
        policy=policy,
    )  # fmt: skip
    err = Console(stderr=True)
    result = run_throughput(config, progress=None if json_out else lambda msg: err.print(f"[dim]{msg}[/]"))
    if json_out:
        print(json.dumps(result.to_dict()))
        return
    Console().print(_table(result))


def register(bench: typer.Typer) -> None:
    """Adds this benchmark's command to the bench group."""
    bench.command("throughput")(throughput)
