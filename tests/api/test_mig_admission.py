"""Registered admission checks: MIG layouts that cannot exist on the pool's GPU model are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import gpufleet.controllers.admission  # noqa: F401 - registers the MIG-layout check
from gpufleet.api.documents import load_objects
from gpufleet.api.errors import ValidationError
from gpufleet.api.pool import GPUPool
from gpufleet.api.validation import registered_validators
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.store import SqliteStore


def pool_yaml(model: str, layout: str) -> str:
    return (
        "apiVersion: gpufleet.io/v1alpha1\nkind: GPUPool\nmetadata: {name: mig}\n"
        f'spec: {{gpuModel: {model}, gpusPerNode: 8, sharing: {{mig: {{"*": {layout}}}}}}}\n'
    )


IMPOSSIBLE = [
    ("H100-80GB", "[7g.80gb, 1g.10gb]"),
    ("A100-80GB", "[4g.40gb, 4g.40gb]"),
    ("H100-80GB", "[3g.40gb, 3g.40gb, 3g.40gb]"),
]


def test_the_sharing_package_registers_its_check() -> None:
    assert registered_validators("GPUPool")


@pytest.mark.parametrize(("model", "layout"), IMPOSSIBLE)
def test_load_objects_refuses_a_layout_that_does_not_fit(model: str, layout: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load_objects(pool_yaml(model, layout))
    assert caught.value.field == "spec.sharing.mig.*"
    assert caught.value.obj == "GPUPool mig"
    assert "does not fit" in caught.value.detail


def test_an_unknown_profile_for_the_model_names_the_valid_ones(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(pool_yaml("A100-80GB", "[1g.12gb]"))
    with pytest.raises(ValidationError) as caught:
        load_objects(path)
    assert caught.value.field == "spec.sharing.mig.*"
    assert "unknown MIG profile '1g.12gb' for A100-80GB" in str(caught.value)


def test_a_layout_that_fits_is_accepted() -> None:
    (pool,) = load_objects(pool_yaml("A100-80GB", "[3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]"))
    assert isinstance(pool, GPUPool)


def test_the_api_refuses_an_impossible_layout_with_422(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path, synchronous="OFF") as store:
        tokens = TokenRegistry(tmp_path)
        client = TestClient(create_app(store, tokens), raise_server_exceptions=False)
        client.headers["Authorization"] = f"Bearer {tokens.admin_token}"
        for model, layout in IMPOSSIBLE:
            response = client.post(
                "/v1/apply", content=pool_yaml(model, layout), headers={"Content-Type": "application/yaml"}
            )
            assert response.status_code == 422, response.json()
            assert response.json()["error"]["field"] == "spec.sharing.mig.*"
        assert store.list(GPUPool).items == []
        response = client.post(
            "/v1/apply",
            content=pool_yaml("H100-80GB", "[3g.40gb, 3g.40gb]"),
            headers={"Content-Type": "application/yaml"},
        )
        assert response.status_code == 200, response.json()
