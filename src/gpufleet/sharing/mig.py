"""The MIG profile catalogue and its placement rules.

A MIG-capable GPU has 7 compute slices and 8 memory slices. Each GPU-instance profile occupies a run of
memory slices that must begin at one of the profile's start slots; instances may not overlap, their
compute slices may not exceed 7, and some profiles are limited in count. The figures are those of
`nvidia-smi mig -lgipp` as collected in NVIDIA-STACK.md section 4.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.api.errors import ValidationError

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one GPU model."""

    name: str
    gpu_model: str
    gi_profile_id: int
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    max_count: int
    memory_gb: int

    @property
    def milli(self) -> int:
        """The share of the GPU's compute this instance holds, in milli-GPU (for quota accounting)."""
        return self.compute_slices * 1000 // COMPUTE_SLICES


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """A profile placed at a start memory slice."""

    profile: str
    start: int
    size: int

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)


# (GI profile id, compute slices, memory slices, start slots, max count) and, per model family, the
# memory size in GB that names the profile.
_SHAPES: tuple[tuple[int, int, int, tuple[int, ...], int, str], ...] = (
    (19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7, ""),
    (20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, "+me"),
    (15, 1, 2, (0, 2, 4, 6), 4, ""),
    (14, 2, 2, (0, 2, 4), 3, ""),
    (9, 3, 4, (0, 4), 2, ""),
    (5, 4, 4, (0,), 1, ""),
    (0, 7, 8, (0,), 1, ""),
)
# Memory in GB per shape, in _SHAPES order, for each MIG-capable model.
_MEMORY_GB: dict[str, tuple[int, ...]] = {
    "A100-40GB": (5, 5, 10, 10, 20, 20, 40),
    "A100-80GB": (10, 10, 20, 20, 40, 40, 80),
    "H100-80GB": (10, 10, 20, 20, 40, 40, 80),
    "H200-141GB": (18, 18, 35, 35, 71, 71, 141),
}
_ALIASES = {
    "A100-SXM4-40GB": "A100-40GB",
    "A100-PCIE-40GB": "A100-40GB",
    "A100-SXM4-80GB": "A100-80GB",
    "A100-PCIE-80GB": "A100-80GB",
    "H100-SXM5-80GB": "H100-80GB",
    "H100-80GB-HBM3": "H100-80GB",
    "H100": "H100-80GB",
    "H200": "H200-141GB",
    "H200-SXM-141GB": "H200-141GB",
}


def _build() -> dict[str, dict[str, MigProfile]]:
    table: dict[str, dict[str, MigProfile]] = {}
    for model, sizes in _MEMORY_GB.items():
        profiles: dict[str, MigProfile] = {}
        for (gi_id, compute, memory, starts, max_count, suffix), gb in zip(_SHAPES, sizes, strict=True):
            name = f"{compute}g.{gb}gb{suffix}"
            profiles[name] = MigProfile(name, model, gi_id, compute, memory, starts, max_count, gb)
        table[model] = profiles
    return table


_CATALOGUE = _build()


def canonical_model(gpu_model: str) -> str:
    """The catalogue's name for a GPU model, or the name unchanged when it is not MIG-capable."""
    return _ALIASES.get(gpu_model, gpu_model)


def mig_capable(gpu_model: str) -> bool:
    return canonical_model(gpu_model) in _CATALOGUE


def mig_models() -> tuple[str, ...]:
    return tuple(_CATALOGUE)


def catalogue(gpu_model: str) -> dict[str, MigProfile]:
    """All profiles of a MIG-capable model, by name; empty for a model without MIG."""
    return dict(_CATALOGUE.get(canonical_model(gpu_model), {}))


def profile(gpu_model: str, name: str, *, field: str = "mig") -> MigProfile:
    """The named profile of a model, or a ValidationError that lists the valid names."""
    profiles = _CATALOGUE.get(canonical_model(gpu_model))
    if profiles is None:
        raise ValidationError(f"GPU model {gpu_model!r} does not support MIG", field=field)
    found = profiles.get(name)
    if found is None:
        raise ValidationError(
            f"unknown MIG profile {name!r} for {gpu_model}; valid: {', '.join(profiles)}", field=field
        )
    return found


def find_profile(gpu_model: str, name: str) -> MigProfile | None:
    """The named profile, or None when the model has no such profile (a request that can never fit)."""
    return _CATALOGUE.get(canonical_model(gpu_model), {}).get(name)


def is_known_profile(name: str) -> bool:
    """Whether any MIG-capable model has a profile of this name."""
    return any(name in profiles for profiles in _CATALOGUE.values())


def _occupied(placements: Iterable[MigPlacement]) -> set[int]:
    used: set[int] = set()
    for placement in placements:
        used.update(placement.slices)
    return used


def free_start(gpu_model: str, placements: Sequence[MigPlacement], name: str) -> int | None:
    """The first start slot where one more instance of `name` fits beside `placements`, or None."""
    prof = find_profile(gpu_model, name)
    if prof is None:
        return None
    if sum(1 for p in placements if p.profile == name) >= prof.max_count:
        return None
    compute = sum(_CATALOGUE[canonical_model(gpu_model)][p.profile].compute_slices for p in placements)
    if compute + prof.compute_slices > COMPUTE_SLICES:
        return None
    used = _occupied(placements)
    for start in prof.starts:
        if start + prof.memory_slices <= MEMORY_SLICES and not used.intersection(
            range(start, start + prof.memory_slices)
        ):
            return start
    return None


def validate_layout(gpu_model: str, placements: Sequence[MigPlacement], *, field: str = "mig") -> None:
    """Raises ValidationError unless every placement uses a valid start slot and none overlap."""
    used: set[int] = set()
    counts: dict[str, int] = {}
    compute = 0
    for i, placement in enumerate(placements):
        prof = profile(gpu_model, placement.profile, field=f"{field}[{i}]")
        if placement.start not in prof.starts or placement.size != prof.memory_slices:
            raise ValidationError(
                f"{placement.profile} cannot start at memory slice {placement.start}; starts: {prof.starts}",
                field=f"{field}[{i}]",
            )
        overlap = used.intersection(placement.slices)
        if overlap:
            raise ValidationError(
                f"{placement.profile} at slice {placement.start} overlaps slices {sorted(overlap)}",
                field=f"{field}[{i}]",
            )
        used.update(placement.slices)
        counts[placement.profile] = counts.get(placement.profile, 0) + 1
        if counts[placement.profile] > prof.max_count:
            raise ValidationError(
                f"at most {prof.max_count} instances of {placement.profile} per GPU", field=f"{field}[{i}]"
            )
        compute += prof.compute_slices
        if compute > COMPUTE_SLICES:
            raise ValidationError(
                f"layout needs more than {COMPUTE_SLICES} compute slices", field=f"{field}[{i}]"
            )


def plan_layout(gpu_model: str, names: Sequence[str], *, field: str = "mig") -> list[MigPlacement]:
    """Start slots for a list of profiles such that they all fit on one GPU.

    Larger instances are placed first (they have the fewest start slots), then a depth-first search
    over the remaining slots; the layouts are tiny (at most 7 instances), so the search is cheap.
    """
    profiles = [profile(gpu_model, name, field=f"{field}[{i}]") for i, name in enumerate(names)]
    order = sorted(
        range(len(profiles)), key=lambda i: (-profiles[i].memory_slices, len(profiles[i].starts), i)
    )
    chosen: dict[int, MigPlacement] = {}

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        prof = profiles[i]
        used = _occupied(chosen.values())
        for start in prof.starts:
            if start + prof.memory_slices > MEMORY_SLICES:
                continue
            if used.intersection(range(start, start + prof.memory_slices)):
                continue
            chosen[i] = MigPlacement(prof.name, start, prof.memory_slices)
            if search(k + 1):
                return True
            del chosen[i]
        return False

    if not search(0):
        raise ValidationError(f"MIG layout {list(names)} does not fit on one {gpu_model}", field=field)
    layout = [chosen[i] for i in range(len(profiles))]
    validate_layout(gpu_model, layout, field=field)
    return layout
