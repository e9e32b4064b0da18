"""Grafana dashboards for the fleet, a queue, a TrainingJob and a node's GPUs.

Built in code, not written as JSON by hand, so the four share one data source variable, one layout and
one way of naming series, and each query is written once. `scripts/gen-dashboards.py` writes them to
`deploy/grafana/*.json` and into the Helm chart's ConfigMaps (labelled `grafana_dashboard: "1"` for
Grafana's dashboard sidecar); tests/observability/test_dashboards.py fails while either copy is stale and
checks that every query reads only series the project exports (docs/observability.md lists them).

Series are named with Grafana's display-name templates (`${__field.labels.pool}`), not legend formats:
a legend format is written `{{pool}}`, which Helm would read as a template action in the chart.

Both scheduler replicas are scraped and only the leader's scheduling series change, so gauges of the
control plane are taken `max by` their own labels before any sum, as the recording rules do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
"""The range of every rate(): Grafana's, at least four scrape intervals."""


@dataclass(frozen=True)
class Query:
    expr: str
    name: str
    """The series' display name, a Grafana template over its labels."""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: Sequence[Query]
    unit: str = "short"
    kind: str = "timeseries"
    """timeseries, or stat for a single figure."""
    description: str = ""
    width: int = 12


def q(expr: str, name: str = "") -> Query:
    return Query(expr, name)


def _panel(panel: Panel, number: int, x: int, y: int) -> Json:
    height = 4 if panel.kind == "stat" else 8
    overrides = [
        {
            "matcher": {"id": "byFrameRefID", "options": _ref(i)},
            "properties": [{"id": "displayName", "value": query.name}],
        }
        for i, query in enumerate(panel.queries)
        if query.name
    ]
    return {
        "id": number,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": overrides},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}} if panel.kind == "stat" else {},
        "targets": [
            {"refId": _ref(i), "datasource": DATASOURCE, "expr": query.expr}
            for i, query in enumerate(panel.queries)
        ],
    }


def _ref(index: int) -> str:
    return chr(ord("A") + index)


def _layout(panels: Sequence[Panel]) -> list[Json]:
    """Left to right in rows of Grafana's 24 columns."""
    out: list[Json] = []
    x = y = row_height = 0
    for number, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        built = _panel(panel, number, x, y)
        out.append(built)
        x += panel.width
        row_height = max(row_height, built["gridPos"]["h"])
    return out


def variable(name: str, label: str, query: str) -> Json:
    """A template variable whose values are a label's, from `label_values(selector, label)`."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": name},
        "refresh": 2,
        "sort": 1,
        "includeAll": False,
        "multi": False,
    }


def dashboard(
    uid: str, title: str, description: str, panels: Sequence[Panel], variables: Sequence[Json] = ()
) -> Json:
    source = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
    }
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["gpufleet"],
        "editable": True,
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": [source, *variables]},
        "panels": _layout(panels),
    }


# ------------------------------------------------------------------------------------ queries
def gpus(state: str, selector: str = "") -> str:
    """GPUs in a state, one series a pool and model whichever replica exports them."""
    matchers = f'state="{state}"' + (f",{selector}" if selector else "")
    return f"max by (pool, model) (gpufleet_gpus{{{matchers}}})"


def quantile(level: float, histogram: str, selector: str = "", by: str = "") -> str:
    groups = f"le, {by}" if by else "le"
    return f"histogram_quantile({level}, sum by ({groups}) (rate({histogram}_bucket{{{selector}}}[{RATE}])))"


def fleet() -> Json:
    by_state = "sum by (state) (max by (pool, model, state) (gpufleet_gpus))"
    per_pool_total = "sum by (pool) (max by (pool, model, state) (gpufleet_gpus))"
    panels = [
        Panel("GPUs allocated", [q(f"sum({gpus('allocated')})")], kind="stat", width=4),
        Panel("GPUs idle", [q(f"sum({gpus('idle')})")], kind="stat", width=4),
        Panel("GPUs unhealthy", [q(f"sum({gpus('unhealthy')})")], kind="stat", width=4),
        Panel(
            "GPUs fragmented",
            [q("sum(max by (pool, model) (gpufleet_fragmented_gpus))")],
            kind="stat",
            width=4,
            description="Allocated GPUs with room only a small request can use.",
        ),
        Panel(
            "Workloads pending",
            [q("sum(max by (queue, reason) (gpufleet_pending_workloads))")],
            kind="stat",
            width=4,
        ),
        Panel(
            "Idle GPU cost, past hour",
            [q("sum(pool:gpufleet_idle_gpu_cost:1h)")],
            unit="currencyUSD",
            kind="stat",
            width=4,
        ),
        Panel("GPUs by state", [q(by_state, "${__field.labels.state}")]),
        Panel(
            "Allocated share of each pool",
            [q(f"sum by (pool) ({gpus('allocated')}) / {per_pool_total}", "${__field.labels.pool}")],
            unit="percentunit",
        ),
        Panel(
            "Pending workloads by reason",
            [
                q(
                    "sum by (reason) (max by (queue, reason) (gpufleet_pending_workloads))",
                    "${__field.labels.reason}",
                )
            ],
        ),
        Panel(
            "Admissions by queue",
            [q(f"sum by (queue) (rate(gpufleet_admissions_total[{RATE}]))", "${__field.labels.queue}")],
            unit="ops",
        ),
        Panel(
            "Preemptions and evictions by reason",
            [
                q(
                    f"sum by (reason) (rate(gpufleet_preemptions_total[{RATE}]))",
                    "preempted ${__field.labels.reason}",
                ),
                q(
                    f"sum by (reason) (rate(gpufleet_evictions_total[{RATE}]))",
                    "evicted ${__field.labels.reason}",
                ),
            ],
            unit="ops",
        ),
        Panel(
            "Scheduling cycle and bind latency",
            [
                q(quantile(0.5, "gpufleet_scheduling_cycle_duration_seconds"), "cycle p50"),
                q(quantile(0.99, "gpufleet_scheduling_cycle_duration_seconds"), "cycle p99"),
                q(quantile(0.99, "gpufleet_bind_duration_seconds"), "bind p99"),
            ],
            unit="s",
        ),
        Panel(
            "Idle GPU-hours and their cost, past hour",
            [
                q("sum by (pool) (pool_model:gpufleet_idle_gpu_hours:1h)", "hours ${__field.labels.pool}"),
                q("pool:gpufleet_idle_gpu_cost:1h", "cost ${__field.labels.pool}"),
            ],
        ),
        Panel(
            "Cost by queue, past hour",
            [q("queue:gpufleet_gpu_cost:1h", "${__field.labels.queue}")],
            unit="currencyUSD",
        ),
        Panel(
            "GPU busy time and power (agents)",
            [
                q("avg(DCGM_FI_DEV_GPU_UTIL)", "mean busy %"),
                q("sum(DCGM_FI_DEV_POWER_USAGE) / 1000", "power kW"),
            ],
        ),
        Panel(
            "GPUs with an XID error, by node",
            [q("count by (Hostname) (DCGM_FI_DEV_XID_ERRORS > 0)", "${__field.labels.Hostname}")],
        ),
        Panel(
            "Hottest GPU of each node",
            [q("topk(10, max by (Hostname) (DCGM_FI_DEV_GPU_TEMP))", "${__field.labels.Hostname}")],
            unit="celsius",
        ),
        Panel(
            "Scrape targets up",
            [q('sum by (job) (up{job=~"gpufleet-.*"})', "${__field.labels.job}")],
            description="Scheduler, operator and agents, as the alert rules know their scrape jobs.",
        ),
    ]
    return dashboard(
        "gpufleet-fleet",
        "gpufleet / Fleet",
        "The whole fleet: GPUs by state, queues' waiting work, scheduling, cost and GPU health.",
        panels,
    )


def queue() -> Json:
    sel = 'queue="$queue"'
    panels = [
        Panel(
            "GPUs used, nominal and borrowed",
            [
                q(f"max by (flavor) (gpufleet_queue_used_gpus{{{sel}}})", "used ${__field.labels.flavor}"),
                q(
                    f"max by (flavor) (gpufleet_queue_nominal_gpus{{{sel}}})",
                    "nominal ${__field.labels.flavor}",
                ),
                q(
                    f"max by (flavor) (gpufleet_queue_borrowed_gpus{{{sel}}})",
                    "borrowed ${__field.labels.flavor}",
                ),
            ],
        ),
        Panel(
            "GPUs held on each pool",
            [q(f"max by (pool) (gpufleet_queue_pool_gpus{{{sel}}})", "${__field.labels.pool}")],
        ),
        Panel(
            "Pending workloads by reason",
            [q(f"max by (reason) (gpufleet_pending_workloads{{{sel}}})", "${__field.labels.reason}")],
        ),
        Panel(
            "Longest wait by reason",
            [q(f"max by (reason) (gpufleet_pending_oldest_seconds{{{sel}}})", "${__field.labels.reason}")],
            unit="s",
            description="The alert GpufleetWorkloadPendingTooLong fires past an hour.",
        ),
        Panel(
            "Wait for admission",
            [
                q(quantile(0.5, "gpufleet_admission_wait_seconds", sel), "p50"),
                q(quantile(0.9, "gpufleet_admission_wait_seconds", sel), "p90"),
            ],
            unit="s",
        ),
        Panel(
            "Admissions by flavor",
            [
                q(
                    f"sum by (flavor) (rate(gpufleet_admissions_total{{{sel}}}[{RATE}]))",
                    "${__field.labels.flavor}",
                )
            ],
            unit="ops",
        ),
        Panel(
            "Preemptions and evictions by reason",
            [
                q(
                    f"sum by (reason) (rate(gpufleet_preemptions_total{{{sel}}}[{RATE}]))",
                    "preempted ${__field.labels.reason}",
                ),
                q(
                    f"sum by (reason) (rate(gpufleet_evictions_total{{{sel}}}[{RATE}]))",
                    "evicted ${__field.labels.reason}",
                ),
            ],
            unit="ops",
        ),
        Panel("Cost, past hour", [q(f"queue:gpufleet_gpu_cost:1h{{{sel}}}", "cost")], unit="currencyUSD"),
    ]
    return dashboard(
        "gpufleet-queue",
        "gpufleet / Queue",
        "One queue (a team or tenant): its quota, waiting work and why, admissions, evictions and cost.",
        panels,
        [variable("queue", "Queue", "label_values(gpufleet_queue_nominal_gpus, queue)")],
    )


def trainingjob() -> Json:
    sel = 'namespace="$namespace",trainingjob="$trainingjob"'
    # The operator names a job's workers <job>-<attempt>-<rank>; the agent labels their GPUs' series.
    workers = 'namespace="$namespace",pod=~"$trainingjob-[0-9]+-[0-9]+"'
    # The age on the control plane's clock, which the checkpoint times are on (with `gpufleet up
    # --time-scale N` it runs ahead of Prometheus' time()); the latest of the targets' clocks.
    checkpointed = f"max(gpufleet_trainingjob_last_checkpoint_timestamp_seconds{{{sel}}})"
    age = f"max(gpufleet_clock_timestamp_seconds) - {checkpointed}"
    panels = [
        Panel("Restarts", [q(f"max(gpufleet_trainingjob_restarts{{{sel}}})")], kind="stat", width=6),
        Panel(
            "GPU-hours lost to restarts",
            [q(f"max(gpufleet_trainingjob_lost_gpu_seconds{{{sel}}}) / 3600")],
            kind="stat",
            width=6,
        ),
        Panel(
            "Checkpoint age",
            [q(age)],
            unit="s",
            kind="stat",
            width=6,
            description="Only while the job runs with checkpoints.",
        ),
        Panel(
            "Checkpoint interval",
            [q(f"max(gpufleet_trainingjob_checkpoint_interval_seconds{{{sel}}})")],
            unit="s",
            kind="stat",
            width=6,
        ),
        Panel(
            "Checkpoint age against its interval",
            [
                q(age, "age"),
                q(f"max(gpufleet_trainingjob_checkpoint_interval_seconds{{{sel}}})", "interval"),
            ],
            unit="s",
        ),
        Panel("Restarts over time", [q(f"max(gpufleet_trainingjob_restarts{{{sel}}})", "restarts")]),
        Panel(
            "Workers' GPU busy time",
            [q(f"DCGM_FI_DEV_GPU_UTIL{{{workers}}}", "${__field.labels.pod} GPU ${__field.labels.gpu}")],
            unit="percent",
        ),
        Panel(
            "Workers' GPU memory used",
            [q(f"DCGM_FI_DEV_FB_USED{{{workers}}}", "${__field.labels.pod} GPU ${__field.labels.gpu}")],
            unit="decmbytes",
        ),
        Panel(
            "Workers' GPU power",
            [q(f"DCGM_FI_DEV_POWER_USAGE{{{workers}}}", "${__field.labels.pod} GPU ${__field.labels.gpu}")],
            unit="watt",
        ),
        Panel(
            "Workers' XID errors",
            [q(f"DCGM_FI_DEV_XID_ERRORS{{{workers}}}", "${__field.labels.pod} GPU ${__field.labels.gpu}")],
        ),
    ]
    return dashboard(
        "gpufleet-trainingjob",
        "gpufleet / TrainingJob",
        "One TrainingJob: restarts, lost work, checkpoint age and its workers' GPUs.",
        panels,
        [
            variable("namespace", "Namespace", "label_values(gpufleet_trainingjob_restarts, namespace)"),
            variable(
                "trainingjob",
                "TrainingJob",
                'label_values(gpufleet_trainingjob_restarts{namespace="$namespace"}, trainingjob)',
            ),
        ],
    )


def node() -> Json:
    sel = 'Hostname="$node"'
    each = "GPU ${__field.labels.gpu} ${__field.labels.GPU_I_PROFILE}"

    def per_gpu(title: str, metric: str, unit: str = "short", description: str = "") -> Panel:
        return Panel(title, [q(f"{metric}{{{sel}}}", each)], unit=unit, description=description)

    panels = [
        Panel(
            "GPUs",
            [q(f"count(DCGM_FI_DEV_GPU_TEMP{{{sel}}})")],
            kind="stat",
            width=6,
        ),
        Panel(
            "GPUs with an XID error",
            [q(f"count(DCGM_FI_DEV_XID_ERRORS{{{sel}}} > 0) or vector(0)")],
            kind="stat",
            width=6,
        ),
        Panel("Power", [q(f"sum(DCGM_FI_DEV_POWER_USAGE{{{sel}}})")], unit="watt", kind="stat", width=6),
        Panel(
            "GPUs held by pods",
            [q(f'count(DCGM_FI_DEV_GPU_UTIL{{{sel},pod!=""}}) or vector(0)')],
            kind="stat",
            width=6,
        ),
        per_gpu("Busy time", "DCGM_FI_DEV_GPU_UTIL", "percent"),
        per_gpu("Memory copy busy time", "DCGM_FI_DEV_MEM_COPY_UTIL", "percent"),
        per_gpu("GPU temperature", "DCGM_FI_DEV_GPU_TEMP", "celsius", "Throttling starts near 85 C."),
        per_gpu("Memory temperature", "DCGM_FI_DEV_MEMORY_TEMP", "celsius", "Throttling starts near 95 C."),
        per_gpu("Power", "DCGM_FI_DEV_POWER_USAGE", "watt"),
        per_gpu("SM clock", "DCGM_FI_DEV_SM_CLOCK", "rotmhz", "A busy GPU's clock held down is throttling."),
        Panel(
            "Frame buffer used",
            [
                q(
                    f"DCGM_FI_DEV_FB_USED{{{sel}}}"
                    f" / (DCGM_FI_DEV_FB_USED{{{sel}}} + DCGM_FI_DEV_FB_FREE{{{sel}}})",
                    each,
                )
            ],
            unit="percentunit",
        ),
        Panel(
            "PCIe throughput",
            [
                q(f"rate(DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{sel}}}[{RATE}])", "tx " + each),
                q(f"rate(DCGM_FI_DEV_PCIE_RX_THROUGHPUT{{{sel}}}[{RATE}])", "rx " + each),
            ],
            unit="KBs",
        ),
        Panel(
            "NVLink bandwidth",
            [q(f"rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{sel}}}[{RATE}])", each)],
        ),
        per_gpu("Last XID", "DCGM_FI_DEV_XID_ERRORS", description="79: fallen off the bus."),
        Panel(
            "Remapped rows and PCIe replays",
            [
                q(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{sel}}}", "uncorrectable " + each),
                q(f"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{{{sel}}}", "correctable " + each),
                q(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{sel}}}", "remap failed " + each),
                q(f"increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{sel}}}[{RATE}])", "PCIe replays " + each),
            ],
        ),
        Panel(
            "Held by",
            [
                q(
                    f'DCGM_FI_DEV_GPU_UTIL{{{sel},pod!=""}}',
                    "${__field.labels.namespace}/${__field.labels.pod} " + each,
                )
            ],
            unit="percent",
            description="Busy time of the GPUs a pod holds, by pod.",
        ),
    ]
    return dashboard(
        "gpufleet-node",
        "gpufleet / Node GPUs",
        "One node's GPUs from its agent: busy time, temperatures, power, clocks, memory, links, errors.",
        panels,
        [variable("node", "Node", "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)")],
    )


DASHBOARDS = {"fleet": fleet, "queue": queue, "trainingjob": trainingjob, "node": node}
"""File stem (deploy/grafana/gpufleet-<stem>.json) -> builder."""


def render(stem: str) -> str:
    """A dashboard as the JSON file it is shipped as."""
    return json.dumps(DASHBOARDS[stem](), indent=2, sort_keys=True) + "\n"
