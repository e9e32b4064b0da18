"""The Cluster kind: a federation's worker cluster, loaded from YAML with errors that name the field."""

from __future__ import annotations

import pytest

from gpufleet.api import Cluster, Queue, load_objects, parse_object
from gpufleet.api.errors import ValidationError
from gpufleet.api.kinds import kind_info

CLUSTER_YAML = """
apiVersion: gpufleet.io/v1alpha1
kind: Cluster
metadata: {name: us-east-a, labels: {tier: prod}}
spec:
  connection:
    embedded:
      url: https://10.0.0.5:8080/
      tokenSecretRef: {name: worker-a, key: token}
  region: us-east
  zone: us-east-1a
  network: fabric-1
  pricePerGPUHour: {H100-80GB: 3.1, A100-40GB: 1.2}
  leaseSeconds: 30
  drain: {running: MoveAtCheckpoint, reason: CHG-1234}
status:
  heartbeatTime: "2026-01-01T00:00:00Z"
  capacity:
    H100-80GB:
      gpus: 16000
      freeGpus: 1200
      bySharing: {exclusive: {gpus: 15000, freeGpus: 1100}, mig: {gpus: 1000, freeMig: {3g.40gb: 12}}}
      largestFreeDomain: {nvlink: 8, host: 8, rack: 64}
"""


def cluster(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "w1"},
        "spec": {"connection": {"kubeconfigSecretRef": {"name": "w1", "key": "kubeconfig"}}, **spec},
    }


def test_a_cluster_round_trips_through_yaml() -> None:
    (obj,) = load_objects(CLUSTER_YAML)
    assert isinstance(obj, Cluster)
    assert obj.spec.connection.kind == "embedded"
    assert obj.spec.connection.embedded is not None
    assert obj.spec.connection.embedded.url == "https://10.0.0.5:8080"
    assert obj.spec.connection.embedded.token_secret_ref.namespace == "gpufleet-system"
    assert obj.spec.price_per_gpu_hour == {"H100-80GB": 3.1, "A100-40GB": 1.2}
    assert obj.spec.drain is not None and obj.spec.drain.running == "MoveAtCheckpoint"
    h100 = obj.status.capacity["H100-80GB"]
    assert h100.largest_free_domain["rack"] == 64 and h100.by_sharing["mig"].free_mig == {"3g.40gb": 12}
    again = parse_object(obj.to_dict())
    assert again == obj
    assert "pricePerGPUHour" in obj.to_dict()["spec"]


def test_the_cluster_kind_is_registered_cluster_wide() -> None:
    info = kind_info("Cluster")
    assert info is not None and info.plural == "clusters" and not info.namespaced and info.crd
    with pytest.raises(ValidationError, match=r"metadata\.namespace"):
        parse_object({**cluster(), "metadata": {"name": "w1", "namespace": "x"}})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {**cluster(), "spec": {"connection": {}}},
            "Cluster w1: field spec.connection.kubeconfigSecretRef: give exactly one of "
            "kubeconfigSecretRef (a Kubernetes worker) or embedded (a gpufleet worker); got neither",
        ),
        (
            {
                **cluster(),
                "spec": {
                    "connection": {
                        "kubeconfigSecretRef": {"name": "a", "key": "k"},
                        "embedded": {"url": "http://x", "tokenSecretRef": {"name": "t", "key": "k"}},
                    }
                },
            },
            "got kubeconfigSecretRef and embedded",
        ),
        (
            {
                **cluster(),
                "spec": {
                    "connection": {
                        "embedded": {"url": "ftp://x", "tokenSecretRef": {"name": "t", "key": "k"}}
                    }
                },
            },
            "field spec.connection.embedded.url",
        ),
        (cluster(pricePerGPUHour={"H100-80GB": -1}), "field spec.pricePerGPUHour: "),
        (cluster(leaseSeconds=0), "field spec.leaseSeconds"),
        (cluster(drain={"running": "Evict"}), "field spec.drain.running"),
    ],
)
def test_bad_clusters_are_rejected_naming_the_field(data: dict[str, object], expected: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_object(data)
    assert expected in str(err.value)


def test_a_queue_may_restrict_and_prefer_clusters() -> None:
    queue = parse_object(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "team-a"},
            "spec": {"clusters": {"selector": "region in (us-east,us-west)", "preferred": ["us-east-a"]}},
        }
    )
    assert isinstance(queue, Queue) and queue.spec.clusters is not None
    assert queue.spec.clusters.preferred == ["us-east-a"] and queue.spec.clusters.allowed is None
    with pytest.raises(ValidationError, match=r"spec\.clusters\.selector"):
        parse_object(
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": "team-a"},
                "spec": {"clusters": {"selector": "region in (a"}},
            }
        )
