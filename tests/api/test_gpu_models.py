"""The GPU model catalogue: which names a fleet definition may use."""

from __future__ import annotations

import pytest

from gpufleet.api.documents import load_objects
from gpufleet.api.errors import ValidationError
from gpufleet.api.gpu_models import (
    _CATALOGUE,
    EXTRA_MODELS_ENV,
    canonical_model,
    is_known_model,
    normalise,
    unknown_model_message,
)
from gpufleet.api.kinds import kind_info
from gpufleet.api.pool import GPUPool
from gpufleet.api.validation import revalidate


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("H100-80GB", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),  # NVML product name
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),  # GPU feature discovery label value
        ("nvidia-h100-nvl", "H100-94GB"),
        ("Tesla-T4", "T4"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("V100M16", "V100M16"),  # the openb trace's own names
        ("G2", "G2"),
    ],
)
def test_aliases_resolve_to_the_canonical_name(name: str, canonical: str) -> None:
    assert canonical_model(name) == canonical


def test_no_alias_names_two_models() -> None:
    seen: dict[str, str] = {}
    for canonical, aliases in _CATALOGUE.items():
        for name in (canonical, *aliases):
            key = normalise(name)
            assert seen.setdefault(key, canonical) == canonical, f"{name} names {seen[key]} and {canonical}"


def test_unknown_names_are_refused_with_a_hint() -> None:
    assert not is_known_model("H900-80GB") and not is_known_model("") and not is_known_model("Z9000")
    message = unknown_model_message("H900-80GB")
    assert "H100-80GB" in message and "gpufleet gpu-models" in message and EXTRA_MODELS_ENV in message


def test_the_environment_adds_models(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not is_known_model("MI300X")
    monkeypatch.setenv(EXTRA_MODELS_ENV, "MI300X, Gaudi3")
    assert canonical_model("mi300x") == "MI300X" and is_known_model("Gaudi3")


POOL = """\
apiVersion: gpufleet.io/v1alpha1
kind: GPUPool
metadata: {name: p1}
spec:
  gpuModel: %s
  gpusPerNode: 8
"""


def test_a_pool_with_an_unknown_model_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        load_objects(POOL % "H900-80GB")
    assert caught.value.field == "spec.gpuModel" and "unknown GPU model 'H900-80GB'" in str(caught.value)
    (pool,) = load_objects(POOL % "NVIDIA-H100-80GB-HBM3")
    assert isinstance(pool, GPUPool) and pool.spec.gpu_model == "NVIDIA-H100-80GB-HBM3"  # kept as written


def test_a_stored_pool_reads_back_even_if_its_model_left_the_catalogue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EXTRA_MODELS_ENV, "MI300X")
    (pool,) = load_objects(POOL % "MI300X")
    monkeypatch.delenv(EXTRA_MODELS_ENV)
    info = kind_info("GPUPool")
    assert info is not None
    assert revalidate(info, pool.to_dict()).spec.gpu_model == "MI300X"  # type: ignore[attr-defined]
