"""Plots of experiment results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the Agg backend is chosen above, first

from gpufleet.sim.fgd import CURVE_PCTS, PolicySummary


def plot_fgd(
    trace: str,
    summaries: Sequence[PolicySummary],
    path: str | Path,
    published: Mapping[str, Mapping[int, float]] | None = None,
) -> Path:
    """Unallocated GPU % against arrived GPU % (75 to 130) per policy; published points as markers."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    low, high = CURVE_PCTS[0], CURVE_PCTS[-1]
    for summary in summaries:
        curve = {k: v for k, v in summary.curve().items() if low <= k <= high}
        (line,) = ax.plot(list(curve), list(curve.values()), label=summary.policy, linewidth=1.6)
        ref = (published or {}).get(summary.policy, {})
        if ref:
            xs = sorted(k for k in ref if low <= k <= high)
            ax.plot(xs, [ref[k] for k in xs], "o", color=line.get_color(), markersize=4, alpha=0.7)
    ax.set_xlim(low, high)
    ax.set_xlabel("arrived GPU request (% of cluster GPUs)")
    ax.set_ylabel("unallocated GPU (% of cluster GPUs)")
    ax.set_title(f"FGD protocol on openb {trace} (lines: ours; dots: published)")
    ax.grid(True, alpha=0.3)
    ax.legend(ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
