"""Each sharing GPUPool's ConfigMap: the named configs its nodes' labels pick, kept in line with the pool."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.agent.config import parse_config
from gpufleet.kube.config import KubeConfig
from gpufleet.kube.operator import Operator

from .fakeapi import FakeApiServer
from .test_fleet import MERGE, POOLS, get_node, make_pool, sync
from .test_operator import Clock
from .test_scheduler import add_node

CONFIG_MAPS = "/api/v1/namespaces/gpu-ops/configmaps"


@pytest.fixture
def op(api: FakeApiServer) -> Operator:
    return Operator(api, config=KubeConfig(namespace="gpu-ops"), clock=Clock())


def config_map(api: FakeApiServer, pool: str) -> dict | None:
    return api.objects.get("/v1/configmaps", {}).get(("gpu-ops", f"gpufleet-sharing-{pool}"))


def test_time_slicing_and_mps_configs_are_what_the_agent_reads_and_follow_the_pool(
    api: FakeApiServer, op: Operator
) -> None:
    make_pool(api, "ts", sharing={"timeSlicing": {"replicas": 4}})
    make_pool(api, "exclusive")
    add_node(api, "n1", labels={"pool": "ts"})
    sync(op)
    made = config_map(api, "ts")
    assert made is not None and config_map(api, "exclusive") is None
    assert made["metadata"]["labels"]["gpufleet.io/pool"] == "ts"
    read = parse_config(yaml.safe_load(made["data"]["time-slicing-4"]))
    assert (
        read.sharing.strategy == "time-slicing" and read.sharing.time_slicing.replicas("nvidia.com/gpu") == 4
    )
    labels = get_node(api, "n1")["metadata"]["labels"]
    assert labels["gpufleet.io/sharing-config"] == "gpufleet-sharing-ts"
    assert labels["nvidia.com/device-plugin.config"] == "time-slicing-4"

    patch = {"spec": {"sharing": {"timeSlicing": None, "mps": {"replicas": 2}}}}
    api.request("PATCH", f"{POOLS}/ts", body=patch, content_type=MERGE)
    sync(op)
    data = config_map(api, "ts")["data"]
    assert set(data) == {"mps-2"}
    read = parse_config(yaml.safe_load(data["mps-2"]))
    assert read.sharing.strategy == "mps" and read.sharing.fail_requests_greater_than_one
    assert get_node(api, "n1")["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "mps-2"

    api.request("PATCH", f"{POOLS}/ts", body={"spec": {"sharing": None}}, content_type=MERGE)
    sync(op)
    assert config_map(api, "ts") is None
    assert "gpufleet.io/sharing-config" not in get_node(api, "n1")["metadata"]["labels"]


def test_a_mig_layout_becomes_a_mig_parted_config_under_the_name_the_node_label_picks(
    api: FakeApiServer, op: Operator
) -> None:
    make_pool(api, "mixed", sharing={"mig": {"*": ["3g.40gb", "3g.40gb"], "1": ["7g.80gb"]}})
    make_pool(api, "uniform", sharing={"mig": {"*": ["1g.10gb"] * 7}})
    sync(op)
    mixed = yaml.safe_load(config_map(api, "mixed")["data"]["gpufleet-mixed"])
    assert mixed == {
        "version": "v1",
        "mig-configs": {
            "gpufleet-mixed": [
                {"devices": [0, 2, 3, 4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
                {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
            ]
        },
    }
    uniform = yaml.safe_load(config_map(api, "uniform")["data"]["all-1g.10gb"])
    assert uniform["mig-configs"]["all-1g.10gb"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
    ]


def test_a_deleted_pool_takes_its_config_map_along(api: FakeApiServer, op: Operator) -> None:
    make_pool(api, "ts", sharing={"timeSlicing": {"replicas": 2}})
    sync(op)
    assert config_map(api, "ts") is not None
    api.request("DELETE", f"{POOLS}/ts")
    op.pools.relist()
    op.mark("GPUPool", "ts")
    op.reconcile_once()
    assert config_map(api, "ts") is None
