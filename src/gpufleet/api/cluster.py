"""Cluster: a worker cluster as the management plane of a federation sees it.

The manager holds the queues and chooses a cluster for each admitted workload (gpufleet.federation);
a worker only runs what it is given. The spec says how to reach the worker, where it is and what its
GPUs cost; the status is what the worker last reported: capacity and free GPUs per model, per sharing
mode and per largest free topology domain, and when it last reported (its heartbeat, which its lease
is counted from).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator

from gpufleet.api.base import ApiModel, field_error
from gpufleet.api.errors import ValidationError
from gpufleet.api.labels import LabelSelector
from gpufleet.api.numerals import plain_digits
from gpufleet.api.resource import Resource, api_version_field, kind_field
from gpufleet.api.runtime import NodeTaint
from gpufleet.api.status import ObjectStatus

READY: Final = "Ready"
"""Condition: the worker reported within its lease and can take new work."""
LEASE_EXPIRED: Final = "LeaseExpired"
"""Condition: no heartbeat for longer than the lease; the worker stops admitting managed work it has
not started, and the manager may dispatch that work elsewhere."""
DRAINING: Final = "Draining"
"""Condition: spec.drain is set; the cluster takes no new work."""

SharingModeName = Literal["exclusive", "timeSlicing", "mps", "mig", "dynamic"]
"""A GPU's sharing mode as a cluster reports it (GPUPool.spec.sharing's modes, and the twin's dynamic)."""


CLUSTER_LOCATION_KEYS: Final = ("region", "zone", "network")
"""Label keys under which a Cluster's spec.region, spec.zone and spec.network are matched by a selector,
beside its metadata.labels (a queue restricted to `region=eu-west` needs no label copied by hand)."""


class ClusterAffinity(ApiModel):
    """Which worker clusters a queue's workloads may run in, and which they prefer.

    The dispatcher first keeps the clusters the workload fits in now, then drops those this forbids,
    then ranks preferred clusters before the others and, among equals, the cheaper first.
    """

    allowed: list[str] | None = Field(
        default=None, description="Names of the only clusters allowed; absent: every cluster."
    )
    selector: str | None = Field(
        default=None,
        description="A label selector the cluster must match (region=eu-west,network!=public), over its "
        "labels and its region, zone and network.",
    )
    preferred: list[str] = Field(
        default_factory=list, description="Names of clusters to choose before others when they fit."
    )

    @field_validator("selector")
    @classmethod
    def _selector_parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                LabelSelector.parse(value)
            except ValidationError as err:
                raise ValueError(str(err)) from None
        return value


class SecretKeyRef(ApiModel):
    """A key of a Secret in the management plane."""

    name: str = Field(min_length=1, description="The Secret's name.")
    namespace: str = Field(default="gpufleet-system", min_length=1, description="The Secret's namespace.")
    key: str = Field(min_length=1, description="The key of the Secret's data that holds the value.")


class EmbeddedWorker(ApiModel):
    """An embedded gpufleet control plane (`gpufleet up`) reached over its HTTP API."""

    url: str = Field(min_length=1, description="Base URL of the worker's API, e.g. https://10.0.0.5:8080.")
    token_secret_ref: SecretKeyRef = Field(description="The Secret key holding the worker's API token.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value.rstrip("/")


class ClusterConnection(ApiModel):
    """How the manager reaches the worker: exactly one of a kubeconfig or an embedded worker's URL."""

    kubeconfig_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Kubernetes worker: the Secret key holding its kubeconfig."
    )
    embedded: EmbeddedWorker | None = Field(
        default=None, description="Embedded gpufleet worker: its URL and the Secret key of its token."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ClusterConnection:
        given = [
            name
            for name, value in (
                ("kubeconfigSecretRef", self.kubeconfig_secret_ref),
                ("embedded", self.embedded),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise field_error(
                "kubeconfigSecretRef",
                "give exactly one of kubeconfigSecretRef (a Kubernetes worker) or embedded (a gpufleet "
                f"worker); got {' and '.join(given) if given else 'neither'}",
            )
        return self

    @property
    def kind(self) -> Literal["kubernetes", "embedded"]:
        return "kubernetes" if self.kubeconfig_secret_ref is not None else "embedded"


class ClusterDrain(ApiModel):
    """Maintenance: no new work goes to the cluster; what runs there finishes, or moves at checkpoints."""

    running: Literal["Finish", "MoveAtCheckpoint"] = Field(
        default="Finish",
        description="Finish: running work stays until done. MoveAtCheckpoint: each running workload is "
        "dispatched elsewhere after its next checkpoint.",
    )
    reason: str = Field(default="", description="Why, for people (a maintenance ticket).")


class ClusterSpec(ApiModel):
    connection: ClusterConnection = Field(description="How the manager reaches the worker.")
    region: str = Field(default="", description="The region the cluster is in (us-east-1).")
    zone: str = Field(default="", description="The zone inside the region (us-east-1a).")
    network: str = Field(
        default="", description="The network the cluster is on: clusters on one network reach each other."
    )
    price_per_gpu_hour: dict[str, float] = Field(
        default_factory=dict,
        description="What one GPU-hour costs per GPU model (H100-80GB: 3.1); a model not listed costs 0.",
    )
    lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How long the cluster may go without a heartbeat before its lease expires: then it "
        "stops admitting managed work it has not started and the manager may move that work.",
    )
    drain: ClusterDrain | None = Field(
        default=None, description="Set for maintenance: no new work; absent: the cluster takes work."
    )

    @field_validator("price_per_gpu_hour")
    @classmethod
    def _prices_not_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for model, price in value.items():
            if price < 0:
                raise ValueError(f"price of {model} must not be negative, got {price}")
        return value


class ModeCapacity(ApiModel):
    """GPUs of one model in one sharing mode."""

    gpus: int = Field(default=0, ge=0, description="Healthy GPUs in this mode.")
    free_gpus: int = Field(default=0, ge=0, description="GPUs no pod holds any part of.")
    free_gpu_milli: int = Field(
        default=0, ge=0, description="Shares still free, in milli-GPU (time-slicing, MPS, dynamic)."
    )
    free_mig: dict[str, int] = Field(
        default_factory=dict, description="MIG: free instances per profile (3g.40gb: 12)."
    )


class HostGroup(ApiModel):
    """Hosts of one model with the same labels (beyond those all of the model's hosts share)."""

    labels: dict[str, str] = Field(default_factory=dict, description="Their labels beyond the common ones.")
    hosts: int = Field(ge=1, description="How many hosts have exactly these labels.")
    free_hosts: dict[str, int] = Field(
        default_factory=dict,
        description="How many of them have each count of free whole GPUs ({'8': 3, '2': 1}).",
    )
    most_free_cpu_milli: dict[str, int] | None = Field(
        default=None,
        description="Per count of free whole GPUs, the most free CPU (milli-CPU) of one such host: a host "
        "whose GPUs are free but whose CPU is taken is no room for a pod that asks CPU. Absent (a worker "
        "of an older release): taken as enough.",
    )
    most_free_memory_mib: dict[str, int] | None = Field(
        default=None, description="The same for free memory, in MiB."
    )

    @field_validator("free_hosts", "most_free_cpu_milli", "most_free_memory_mib")
    @classmethod
    def _counts_are_numbers(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for free, count in (value or {}).items():
            if not plain_digits(free) or int(free) < 1 or count < 0:
                raise ValueError(
                    f"keys are free GPU counts (1 or more), values not negative; got {free}: {count}"
                )
        return value


class HostLabelReport(ApiModel):
    """A model's hosts grouped by label, so node selectors and required node affinity are matched at the
    manager; at most 32 groups, whatever the number of hosts."""

    common: dict[str, str] = Field(default_factory=dict, description="Labels every host of the model has.")
    groups: list[HostGroup] = Field(default_factory=list, description="The hosts by their other labels.")
    unlisted_keys: list[str] = Field(
        default_factory=list,
        description="Label keys left out (topology levels, per-host keys such as kubernetes.io/hostname): "
        "a selector's requirement on one of them is not checked by the manager.",
    )


class ModelCapacity(ApiModel):
    """What the cluster has of one GPU model."""

    gpus: int = Field(default=0, ge=0, description="Healthy GPUs of the model.")
    free_gpus: int = Field(default=0, ge=0, description="Whole GPUs no pod holds any part of.")
    by_sharing: dict[SharingModeName, ModeCapacity] = Field(
        default_factory=dict, description="The same per sharing mode."
    )
    largest_free_domain: dict[str, int] = Field(
        default_factory=dict,
        description="Per topology level (nvlink, host, rack, block...), the most free whole GPUs of the "
        "model in one domain of that level: the biggest gang that still fits inside one.",
    )
    free_domains: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Per topology level, how many domains have each count of free whole GPUs ({host: "
        "{'8': 1500, '3': 20}}: 1,500 hosts with 8 free, 20 with 3); what the manager dispatches on.",
    )
    host_cpu_milli: int | None = Field(
        default=None,
        ge=0,
        description="The most allocatable CPU of one host of the model, in milli-CPU: a pod asking more "
        "never fits there. Absent (a worker of an older release): taken as enough for any pod.",
    )
    host_memory_mib: int | None = Field(
        default=None,
        ge=0,
        description="The most allocatable memory of one host of the model, in MiB; absent as for CPU.",
    )
    host_taints: list[NodeTaint] = Field(
        default_factory=list,
        description="The NoSchedule and NoExecute taints every host of the model carries (empty when one "
        "has none): a pod that does not tolerate one of them never fits there.",
    )
    host_labels: HostLabelReport | None = Field(
        default=None,
        description="The hosts grouped by label, for node selectors and required node affinity. Absent (a "
        "worker of an older release): any host is taken as matching.",
    )

    @field_validator("free_domains")
    @classmethod
    def _counts_are_numbers(cls, value: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for level, histogram in value.items():
            for free, count in histogram.items():
                if not plain_digits(free) or int(free) < 1 or count < 0:
                    raise ValueError(
                        f"{level}: keys are free GPU counts (1 or more) and values domain counts, got "
                        f"{free}: {count}"
                    )
        return value


class DispatchCount(ApiModel):
    """Which of the manager's dispatches a report's figures already count.

    The manager numbers each dispatch (`gpufleet.io/dispatch-sequence` on the copy, increasing) and takes
    out of a cluster's summary the work it holds there that the report does not count: dispatched after
    the report was taken, or there but not placed yet. Without this, work dispatched since a report
    would be dispatched onto again until the next report (a slow or lossy link over-fills a cluster).
    Only the copies not yet placed are listed, so the report stays small however much work runs there.
    """

    newest: int = Field(
        ge=0,
        description="The newest dispatch sequence among the managed work the worker held when it took the "
        "report (0: none): every dispatch up to it had reached the worker.",
    )
    uncounted: list[int] = Field(
        default_factory=list,
        description="Sequences of that work the figures do not count: not placed yet (suspended, or waiting "
        "in the worker's queue). Finished and placed work is counted.",
    )


class ClusterStatus(ObjectStatus):
    capacity: dict[str, ModelCapacity] = Field(
        default_factory=dict, description="Per GPU model, the worker's capacity and what is free."
    )
    heartbeat_time: AwareDatetime | None = Field(
        default=None, description="When the worker last reported; its lease runs from here."
    )
    topology_levels: list[str] = Field(
        default_factory=list,
        description="The worker's labelled topology levels, coarse to fine (block, rack): the levels of "
        "freeDomains besides nvlink and host, in the order a gang inside one rack is inside one block.",
    )
    running_workloads: int = Field(default=0, ge=0, description="Managed workloads running there.")
    dispatches: DispatchCount | None = Field(
        default=None,
        description="Which of the manager's dispatches the figures count. Absent (a worker of an older "
        "release): the manager takes the figures as counting all it sent there.",
    )
    lease_seconds: float | None = Field(
        default=None,
        gt=0,
        description="The lease the worker runs under since its last heartbeat (spec.leaseSeconds as it "
        "read it then): the manager moves its work only once this lease has lapsed, whatever the spec "
        "says now.",
    )

    def lease_end(self) -> float | None:
        """When the lease of the last heartbeat ends (epoch seconds); None before any heartbeat."""
        if self.heartbeat_time is None or self.lease_seconds is None:
            return None
        return self.heartbeat_time.timestamp() + self.lease_seconds


class Cluster(Resource):
    """A worker cluster of a federation (cluster-wide, in the management plane)."""

    NAMESPACED = False

    api_version: Literal["gpufleet.io/v1alpha1"] = api_version_field()
    kind: Literal["Cluster"] = kind_field("Cluster")
    spec: ClusterSpec = Field(description="How to reach the worker, where it is, its prices and drain.")
    status: ClusterStatus = Field(
        default_factory=ClusterStatus, description="What the worker last reported, and its conditions."
    )
