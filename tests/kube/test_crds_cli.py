"""CRD installation and the `gpufleet kube` command's options."""

from __future__ import annotations

import pytest

from gpufleet.api.crd import custom_resource_definitions
from gpufleet.api.errors import ValidationError
from gpufleet.cli.kube import parse_levels
from gpufleet.kube.config import TopologyLevel
from gpufleet.kube.crds import install_crds

from .fakeapi import FakeApiServer


def test_install_creates_then_updates_every_crd() -> None:
    api = FakeApiServer(crds=False)
    names = install_crds(api, sleep=lambda _: None)
    expected = sorted(c["metadata"]["name"] for c in custom_resource_definitions())
    assert sorted(names) == expected and "trainingjobs.gpufleet.io" in names
    table = api.objects["apiextensions.k8s.io/v1/customresourcedefinitions"]
    before = table[("", "queues.gpufleet.io")]["metadata"]["resourceVersion"]
    changed = [dict(c) for c in custom_resource_definitions()]
    for crd in changed:
        crd["metadata"] = {**crd["metadata"], "labels": {"app.kubernetes.io/version": "next"}}
    install_crds(api, changed, sleep=lambda _: None)
    after = table[("", "queues.gpufleet.io")]["metadata"]
    assert after["resourceVersion"] != before and after["labels"] == {"app.kubernetes.io/version": "next"}


def test_install_waits_for_established_and_gives_up() -> None:
    api = FakeApiServer(crds=False)
    crd = custom_resource_definitions()[0]
    api.put("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    api.objects["apiextensions.k8s.io/v1/customresourcedefinitions"][("", crd["metadata"]["name"])][
        "status"
    ] = {}
    with pytest.raises(TimeoutError, match=crd["metadata"]["name"]):
        install_crds(api, [crd], wait_seconds=0, sleep=lambda _: None)


def test_topology_levels_from_the_command_line() -> None:
    assert parse_levels(["rack=example.com/rack"]) == (TopologyLevel("rack", "example.com/rack"),)
    with pytest.raises(ValidationError, match="--topology-level"):
        parse_levels(["rack"])
