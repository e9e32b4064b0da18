"""The placement scoring policies by name: the one list of them.

Every name a scheduler config, a scenario or a benchmark may give maps here to its policy class; the
list is written out rather than filled by the policy modules as they are imported, so which names are
valid never depends on what a process imported first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from gpufleet.api.errors import GpuFleetError
from gpufleet.scheduler.placement.score_basic import (
    BestFitPolicy,
    ClusteringPolicy,
    DotProductPolicy,
    PackingPolicy,
    RandomPolicy,
    SpreadPolicy,
)
from gpufleet.scheduler.placement.score_fgd import FgdPolicy
from gpufleet.scheduler.placement.score_fgdplus import AdaptiveFgdPolicy
from gpufleet.scheduler.placement.scoring import ScorePolicy

PolicyFactory = Callable[..., ScorePolicy]

# In the order tables and plots show them.
POLICIES: Final[Mapping[str, PolicyFactory]] = MappingProxyType(
    {
        "random": RandomPolicy,
        "dotprod": DotProductPolicy,
        "clustering": ClusteringPolicy,
        "packing": PackingPolicy,
        "bestfit": BestFitPolicy,
        "fgd": FgdPolicy,
        "fgd+": AdaptiveFgdPolicy,
        "spread": SpreadPolicy,
    }
)

POLICY_NAMES: Final[tuple[str, ...]] = tuple(POLICIES)


def get_policy(name: str, **config: Any) -> ScorePolicy:
    """A new policy object by name; unknown names raise GpuFleetError listing the valid ones."""
    factory = POLICIES.get(name)
    if factory is None:
        valid = ", ".join(sorted(POLICIES))
        raise GpuFleetError(f"unknown placement policy {name!r}; valid: {valid}", field="policy")
    return factory(**config)
