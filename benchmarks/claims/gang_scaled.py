"""Claim (b) on a larger fleet: the utilisation cost of gang scheduling at 2,048 GPUs (256 nodes).

The committed traces (`traces/gang.csv`, `traces/gang-split.csv`) are drawn for 256 GPUs. This script
draws the same stream for `--fleet-gpus` (make_traces.gang_trace: same seed, same load, so 8x the jobs
at 2,048 GPUs) into a temporary directory, with one of two mixes:

- `same`: the same job sizes (1 to 64 GPUs): the largest gang is now 1/32 of the fleet, not 1/4;
- `quarter`: every size scaled with the fleet (64/256 becomes 512/2,048: 8 to 512 GPUs at 2,048), so
  the largest gangs are a quarter of the fleet again. It is the 256-GPU trace's rows with each job
  scaled up, a node standing for a GPU.

Each trace and its split (make_traces.without_gangs: the same work with no gang constraint) runs under
every configuration given (default: gpufleet's defaults and strict FIFO, `b-gpufleet.yaml` and
`b-fifo.yaml`), one simulation at a time, through `gpufleet simulate --compare`'s engine
(`sim.jobsim.simulate` with the same window, queues and options), printing one JSON line per run and
one per configuration with the cost of gangs (utilisation without gangs less with, in points).

Run from the repository root (CPU-heavy: under `nice`):
    nice -n 10 .venv/bin/python benchmarks/claims/gang_scaled.py --mix same --days 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.sim import compare, jobfleet, jobreport, jobsim, philly

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # make_traces sits beside this script; benchmarks/ is not a package
import make_traces  # noqa: E402

BASE_FLEET = 256
"""The fleet the committed traces and the default sizes are drawn for."""
CONFIGS = (HERE / "b-gpufleet.yaml", HERE / "b-fifo.yaml")


def sizes_for(mix: str, fleet_gpus: int) -> tuple[int, ...]:
    """The job sizes of `mix`: the default ones, or scaled with the fleet from 256 GPUs."""
    if mix == "same":
        return make_traces.GANG_SIZES
    if fleet_gpus % BASE_FLEET:
        raise SystemExit(f"--fleet-gpus: the quarter mix needs a multiple of {BASE_FLEET}, got {fleet_gpus}")
    return tuple(s * fleet_gpus // BASE_FLEET for s in make_traces.GANG_SIZES)


def write_traces(folder: Path, *, fleet_gpus: int, mix: str, days: float) -> dict[str, Path]:
    """The gang trace and its split, drawn for `days` (the default 2 days, as the committed ones)."""
    rows = make_traces.gang_trace(days=days, fleet_gpus=fleet_gpus, sizes=sizes_for(mix, fleet_gpus))
    stem = f"gang-{fleet_gpus}-{mix}"
    paths = {"gang": folder / f"{stem}.csv", "split": folder / f"{stem}-split.csv"}
    make_traces.write(paths["gang"], rows)
    make_traces.write(paths["split"], make_traces.without_gangs(rows))
    return paths


def progress(line: str) -> None:
    """The simulator's progress (simulated day, jobs finished, every 10 s) on stderr: runs take minutes."""
    print(line, file=sys.stderr, flush=True)


def run(path: Path, spec: compare.RunSpec, *, fleet_gpus: int, days: float) -> dict[str, float | int]:
    """One run as `gpufleet simulate --trace PATH --gpus N --days D --compare CONFIG` makes it."""
    loaded = philly.load(path)
    begin = loaded.busy_start()
    window = loaded.window(begin, days)
    pools = jobfleet.fleet_of_gpus(fleet_gpus, spot=spec.spot)
    queues = compare.queues_of(spec, pools, window)
    clock = time.process_time()
    result = jobsim.simulate(
        loaded, pools, queues, begin=begin, days=days, options=spec.options, progress=progress
    )
    summary = jobreport.summarise(result)
    return {
        "jobs": summary.jobs,
        "utilisation": summary.utilisation,
        "goodput": summary.goodput,
        "wait_mean_h": summary.wait_mean / 3600,
        "jct_mean_h": summary.jct_mean / 3600,
        "fragmented": summary.fragmented,
        "cpu_s": time.process_time() - clock,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet-gpus", type=int, default=2048)
    parser.add_argument("--mix", choices=("same", "quarter"), default="same")
    parser.add_argument("--days", type=float, default=2.0, help="the window (the traces are drawn for it)")
    parser.add_argument("--configs", nargs="+", type=Path, default=list(CONFIGS))
    parser.add_argument("--traces", type=Path, help="keep the traces in this folder (default: a temp one)")
    args = parser.parse_args()
    specs = compare.load_configs(args.configs)
    folder = args.traces or Path(tempfile.mkdtemp(prefix="gang-scaled-"))
    paths = write_traces(folder, fleet_gpus=args.fleet_gpus, mix=args.mix, days=args.days)
    for spec in specs:
        got = {}
        for kind, path in paths.items():
            got[kind] = run(path, spec, fleet_gpus=args.fleet_gpus, days=args.days)
            row = {"mix": args.mix, "fleet_gpus": args.fleet_gpus, "days": args.days, "trace": kind}
            print(json.dumps({**row, "run": spec.name, "policy": spec.policy, **got[kind]}), flush=True)
        cost = (got["split"]["utilisation"] - got["gang"]["utilisation"]) * 100
        print(json.dumps({"mix": args.mix, "run": spec.name, "cost_of_gangs_points": cost}), flush=True)


if __name__ == "__main__":
    main()
