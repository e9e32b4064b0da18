"""What a cluster needs for the node agent as a DRA driver (`agent.dra: true`): NVIDIA's DeviceClasses,
the agent's DRA permissions, and the admission policy that holds each agent to its own node's slices.

RBAC cannot say "only the slices of my node": a ClusterRole grants `resourceslices` create, update and
delete on every slice. As NVIDIA's DRA driver chart does (and the kubelet plugin library documents),
a ValidatingAdmissionPolicy narrows it: a write by the agent's service account is refused unless the
slice's `spec.nodeName` (the old object's, for a delete) is the node named in the request's
`authentication.kubernetes.io/node-name` user extra, which the API server puts in the tokens it
issues to a pod bound to a node (ServiceAccountTokenPodNodeInfo, on by default since 1.32). A token
without that extra writes nothing; a slice of another driver is refused too. Refusals are 403
Forbidden (a policy's default, 422 Invalid, would say the slice is wrong rather than the writer). The
rule is the node authorizer's for kubelets, which the agent's service account cannot use. docs/dra.md
says why.
"""

from __future__ import annotations

from gpufleet.kube.transport import Json
from gpufleet.sharing.dra_slices import DRIVER

Rule = tuple[str, tuple[str, ...], tuple[str, ...], str]

DEVICE_CLASSES: tuple[tuple[str, str], ...] = (
    ("gpu.nvidia.com", "gpu"),
    ("mig.nvidia.com", "mig"),
)
"""NVIDIA's class names and the `type` attribute each selects, so claims written for NVIDIA's driver
select the same devices here."""

AGENT_DRA_RULES: tuple[Rule, ...] = (
    (
        "resource.k8s.io",
        ("resourceclaims",),
        ("get",),
        "DRA: the allocation of a claim the kubelet asks the agent to prepare (it writes no claim status)",
    ),
    (
        "resource.k8s.io",
        ("resourceslices",),
        ("list", "create", "update", "delete"),
        "DRA: its node's ResourceSlices (the admission policy refuses any other node's)",
    ),
)

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
POLICY = "gpufleet-agent-resourceslices"


def device_classes() -> list[Json]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": _labels()},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{DRIVER}" && '
                            f'device.attributes["{DRIVER}"].type == "{kind}"'
                        }
                    }
                ]
            },
        }
        for name, kind in DEVICE_CLASSES
    ]


def slice_policy(namespace: str, account: str) -> list[Json]:
    """The ValidatingAdmissionPolicy holding `account` to its node's slices, and its binding."""
    user = f"system:serviceaccount:{namespace}:{account}"
    policy: Json = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": _labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["resourceslices"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "isTheAgent", "expression": f'request.userInfo.username == "{user}"'}
            ],
            "variables": [
                {
                    "name": "userNodeName",
                    "expression": f"request.userInfo.extra[?'{NODE_NAME_EXTRA}'][0].orValue('')",
                },
                {
                    "name": "slice",
                    "expression": 'request.operation == "DELETE" ? oldObject : object',
                },
            ],
            "validations": [
                {
                    "expression": 'variables.userNodeName != ""',
                    "message": "the agent's token names no node: it must run in a pod bound to a node "
                    "(ServiceAccountTokenPodNodeInfo)",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.slice.spec.?nodeName.orValue('') == variables.userNodeName",
                    "messageExpression": '"the agent on node " + variables.userNodeName + '
                    '" may write only that node\'s ResourceSlices"',
                    "reason": "Forbidden",
                },
                {
                    "expression": f'variables.slice.spec.driver == "{DRIVER}"',
                    "message": f"the agent may write only ResourceSlices of driver {DRIVER}",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding: Json = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "labels": _labels()},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def _labels() -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gpufleet",
        "app.kubernetes.io/component": "agent",
        "app.kubernetes.io/part-of": "gpufleet",
    }
