"""The GPU model catalogue: which names a fleet definition may use."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gpufleet.api.documents import load_objects
from gpufleet.api.errors import ValidationError
from gpufleet.api.gpu_models import (
    _CATALOGUE,
    EXTRA_MODELS_ENV,
    added_models,
    canonical_model,
    extra_models,
    is_known_model,
    load_extra_models,
    normalise,
    set_extra_models,
    unknown_model_message,
)
from gpufleet.api.kinds import kind_info
from gpufleet.api.pool import GPUPool
from gpufleet.api.validation import revalidate


@pytest.fixture(autouse=True)
def extras_restored() -> Iterator[None]:
    """Each test may add models; the next one finds the process's own again."""
    before = extra_models()
    yield
    set_extra_models(before)


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


def test_the_environment_adds_models_when_the_process_loads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    set_extra_models(())
    assert not is_known_model("MI300X")
    monkeypatch.setenv(EXTRA_MODELS_ENV, "MI300X, Gaudi3,,H100")
    assert not is_known_model("MI300X")  # read once, at start: a later change is not seen
    assert load_extra_models() == ("MI300X", "Gaudi3", "H100")
    assert canonical_model("mi300x") == "MI300X" and is_known_model("Gaudi3")
    assert added_models() == ["MI300X", "Gaudi3"]  # H100 is in the catalogue already
    monkeypatch.setenv(EXTRA_MODELS_ENV, "Gaudi3")
    assert is_known_model("MI300X")


def test_added_models_are_set_outright_and_replace_the_previous_ones() -> None:
    set_extra_models(["MI300X"])
    assert is_known_model("MI300X") and not is_known_model("Gaudi3")
    set_extra_models(["Gaudi3"])
    assert canonical_model("gaudi3") == "Gaudi3" and not is_known_model("MI300X")


def test_the_command_reads_the_environment_at_start() -> None:
    """As the README says: `GPUFLEET_GPU_MODELS=MI300X,Gaudi3` adds names."""
    env = {**os.environ, EXTRA_MODELS_ENV: "MI300X,Gaudi3"}
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "gpu-models"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"MI300X  (from {EXTRA_MODELS_ENV})" in lines and f"Gaudi3  (from {EXTRA_MODELS_ENV})" in lines


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
    # Written as the catalogue's name: placement and quotas compare model names exactly.
    assert isinstance(pool, GPUPool) and pool.spec.gpu_model == "H100-80GB"


JOB = """
apiVersion: gpufleet.io/v1alpha1
kind: TrainingJob
metadata: {name: j1}
spec:
  queue: q
  replicas: 1
  worker: {gpus: 1, gpuModel: %s}
"""


def test_a_jobs_model_alias_is_written_as_the_canonical_name() -> None:
    (job,) = load_objects(JOB % "H100")
    assert job.spec.worker.gpu_model == "H100-80GB"  # type: ignore[attr-defined]
    (job,) = load_objects(JOB % "[H100, nvidia a100-sxm4-80gb]")
    assert job.spec.worker.gpu_model == ["H100-80GB", "A100-80GB"]  # type: ignore[attr-defined]


def test_a_jobs_unknown_model_is_refused_with_the_closest_names() -> None:
    with pytest.raises(ValidationError) as caught:
        load_objects(JOB % "H100-80B")
    assert caught.value.field == "spec.worker.gpuModel"
    assert "did you mean H100-80GB" in str(caught.value)


def test_a_queues_quota_for_an_alias_counts_under_the_canonical_name() -> None:
    (queue,) = load_objects(
        "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec:\n"
        "  quotas: {H100: {nominal: 8}, H100/spot: {nominal: 2}, 1g.10gb: {nominal: 1}}\n"
        "  flavorOrder: [H100/spot, H100, 1g.10gb]\n"
    )
    assert list(queue.spec.quotas) == ["H100-80GB", "H100-80GB/spot", "1g.10gb"]  # type: ignore[attr-defined]
    assert queue.spec.flavor_order == ["H100-80GB/spot", "H100-80GB", "1g.10gb"]  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="name the same GPU model"):
        load_objects(
            "apiVersion: gpufleet.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec:\n"
            "  quotas: {H100: {nominal: 8}, H100-80GB: {nominal: 2}}\n"
        )


@pytest.mark.parametrize("value", ['"8"', "8.0", "true"])
def test_a_pools_gpus_per_node_must_be_an_integer(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load_objects((POOL % "H100-80GB").replace("gpusPerNode: 8", f"gpusPerNode: {value}"))
    assert caught.value.field == "spec.gpusPerNode" and "integer" in str(caught.value)


def test_a_stored_pool_reads_back_even_if_its_model_left_the_catalogue() -> None:
    set_extra_models(["MI300X"])
    (pool,) = load_objects(POOL % "MI300X")
    set_extra_models(())
    info = kind_info("GPUPool")
    assert info is not None
    assert revalidate(info, pool.to_dict()).spec.gpu_model == "MI300X"  # type: ignore[attr-defined]
