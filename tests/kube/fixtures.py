"""Real-shaped Node and Pod objects, as a 1.3x API server returns them (written from the API reference).

Builders return the full shape (status.nodeInfo, managedFields, conditions, defaulted pod fields) so
the translation is tested against what it meets in a cluster, not against a minimal dict.
"""

from __future__ import annotations

import copy
from typing import Any

GFD_H100 = {
    "nvidia.com/cuda.driver-version.full": "570.124.06",
    "nvidia.com/cuda.driver-version.major": "570",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "DGX-H100",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.mode": "compute",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mps.capable": "false",
}


def node(
    name: str,
    *,
    gpus: int = 8,
    allocatable_gpus: int | None = None,
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    resources = {
        "cpu": "224",
        "ephemeral-storage": "1843269236Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "2113389876Ki",
        "nvidia.com/gpu": str(gpus),
        "pods": "110",
    }
    resources.update(extra or {})
    allocatable = dict(resources, cpu="223500m", memory="2112341300Ki")
    if allocatable_gpus is not None:
        allocatable["nvidia.com/gpu"] = str(allocatable_gpus)
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **(annotations or {}),
            },
            "creationTimestamp": "2026-11-01T08:00:00Z",
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": "us-east-1a",
                **GFD_H100,
                **(labels or {}),
            },
            "managedFields": [
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "manager": "kubelet",
                    "operation": "Update",
                    "time": "2026-11-01T08:00:00Z",
                }
            ],
            "name": name,
            "resourceVersion": "4182",
            "uid": f"0b8f6f4e-2c1d-4c7e-9a55-{abs(hash(name)) % 10**12:012d}",
        },
        "spec": {
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24"],
            "providerID": f"aws:///us-east-1a/{name}",
        },
        "status": {
            "addresses": [
                {"address": "10.0.1.17", "type": "InternalIP"},
                {"address": name, "type": "Hostname"},
            ],
            "allocatable": allocatable,
            "capacity": resources,
            "conditions": [
                {
                    "lastHeartbeatTime": "2026-11-29T11:59:00Z",
                    "lastTransitionTime": "2026-11-01T08:01:00Z",
                    "message": "kubelet has sufficient memory available",
                    "reason": "KubeletHasSufficientMemory",
                    "status": "False",
                    "type": "MemoryPressure",
                },
                {
                    "lastHeartbeatTime": "2026-11-29T11:59:00Z",
                    "lastTransitionTime": "2026-11-01T08:01:00Z",
                    "message": "kubelet is posting ready status",
                    "reason": "KubeletReady",
                    "status": "True" if ready else "Unknown",
                    "type": "Ready",
                },
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "b1",
                "containerRuntimeVersion": "containerd://2.0.4",
                "kernelVersion": "6.8.0-1021-aws",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.33.2",
                "machineID": "m1",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.2 LTS",
                "systemUUID": "s1",
            },
        },
    }
    if taints:
        obj["spec"]["taints"] = taints
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    return obj


def pod(
    name: str,
    *,
    namespace: str = "team-a",
    gpus: int | None = 1,
    resources: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "gpufleet",
    node_name: str | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    priority: int | None = None,
    created: str = "2026-11-29T11:00:00Z",
    phase: str = "Pending",
) -> dict[str, Any]:
    limits = dict(resources or {})
    if gpus is not None:
        limits["nvidia.com/gpu"] = str(gpus)
    requests = {
        "cpu": "8",
        "memory": "64Gi",
        **{k: v for k, v in limits.items() if k not in ("cpu", "memory")},
    }
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": dict(annotations or {}),
            "creationTimestamp": created,
            "labels": dict(labels or {}),
            "name": name,
            "namespace": namespace,
            "resourceVersion": "5120",
            "uid": f"7d3c1b2a-0f4e-4b6a-8c9d-{abs(hash((namespace, name))) % 10**12:012d}",
        },
        "spec": {
            "containers": [
                {
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "imagePullPolicy": "IfNotPresent",
                    "name": "worker",
                    "resources": {"limits": limits, "requests": requests},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [
                        {
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "name": "kube-api-access-x7k2p",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0 if priority is None else priority,
            "restartPolicy": "Never",
            "schedulerName": scheduler,
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
                *(tolerations or []),
            ],
        },
        "status": {"phase": phase, "qosClass": "Burstable"},
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if node_selector:
        obj["spec"]["nodeSelector"] = node_selector
    return obj


def gang(name: str, size: int, *, gpus: int = 8, queue: str = "team-a", **extra: Any) -> list[dict[str, Any]]:
    labels = {"gpufleet.io/gang": name, "gpufleet.io/gang-size": str(size), "gpufleet.io/queue": queue}
    labels.update(extra.pop("labels", {}))
    return [pod(f"{name}-{i}", gpus=gpus, labels=copy.deepcopy(labels), **extra) for i in range(size)]
