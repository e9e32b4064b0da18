"""Claim (a): goodput of a 25,000-GPU fleet with a GPU failure every 2.5 h, by checkpoint interval.

Each run replays `traces/failures-25k.csv` (six 4,096-GPU pretraining gangs and 8-GPU fill jobs, see
make_traces.py) with `failures-queues.yaml` through `gpufleet simulate`'s engine (`sim.jobsim.simulate`:
the controllers and scheduling core of `gpufleet up` on the twin) for the window only (no drain):
utilisation, goodput, failures and restarts are all inside it. A run without failures at the same
restart time is the baseline: what the window costs anyway (every pod's first start pays the restart
time; the 40 spare GPUs are idle), so that the cost of failures is the difference.

Per failure, a gang loses the work since its last checkpoint (half an interval on average) and pays
the restart time on all its GPUs; the model line is that, at the claim's rate:
    goodput = baseline - rate on gang GPUs x gang GPUs x (interval / 2 + restart) / 25,000.
`--gang-gpus 8192` runs three 8,192-GPU gangs instead of six of 4,096 (the same GPUs).
A window holds few failures (4.8 expected in 12 h), so the measured figure also scales to the claim's
rate: baseline - (baseline - goodput) x expected failures / failures seen.
The committed traces are drawn for 12 h (`--days 0.5`); for another window the sweep draws the same
trace at that length (make_traces.failures_trace), so the gangs still run through the window and the
fill backlog lasts it.

Run from the repository root:
    .venv/bin/python benchmarks/claims/failures_sweep.py --restart 5m --intervals 15m,30m,1h,2h [--days 0.5]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.sim import jobfleet, jobreport, jobsim, philly
from gpufleet.sim.options import parse_duration

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # make_traces sits beside this script; benchmarks/ is not a package
import make_traces  # noqa: E402

TRACE_DAYS = 0.5
"""The window the committed traces are drawn for."""
FLEET_GPUS = 25_000
GANG_GPUS = 6 * 4096
"""GPUs in gangs: six of 4,096 or three of 8,192."""
MTBF = 2.5 * 3600


def trace_file(gang: int) -> Path:
    """The trace of gangs of `gang` GPUs (make_traces.py: 4,096, the default, and 8,192)."""
    return HERE / "traces" / ("failures-25k.csv" if gang == 4096 else f"failures-25k-{gang}.csv")


def trace_for(gang: int, days: float, folder: Path) -> Path:
    """The committed trace for the 12 h window; for another window the same trace drawn at its length
    into `folder` (the committed one would end inside it: gangs that finish, a fill backlog that runs out)."""
    if days == TRACE_DAYS:
        return trace_file(gang)
    path = folder / f"failures-25k-{gang}-{days:g}d.csv"
    make_traces.write(path, make_traces.failures_trace(days=days, job_gpus=gang))
    return path


def run(
    trace_path: Path, days: float, restart: float, interval: float | None, failures: bool, seed: int
) -> dict[str, float]:
    trace = philly.load(trace_path)
    pools = jobfleet.fleet_of_gpus(FLEET_GPUS)
    queues = jobfleet.queues_for("gpufleet", pools, trace, HERE / "failures-queues.yaml")
    options = jobsim.SimOptions(
        checkpoint_interval=interval,
        gpu_mtbf_seconds=MTBF if failures else None,
        restart_seconds=restart,
        drain=False,
        seed=seed,
    )
    clock = time.process_time()
    result = jobsim.simulate(trace, pools, queues, days=days, options=options)
    summary = jobreport.summarise(result)
    return {
        "failures": result.faults.get("GpuFailure", 0),
        "restarts": summary.restarts,
        "lost_gpu_hours": summary.lost_gpu_hours,
        "utilisation": summary.utilisation,
        "goodput": summary.goodput,
        "cpu_s": time.process_time() - clock,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restart", default="5m")
    parser.add_argument("--intervals", default="15m,30m,1h,2h")
    parser.add_argument("--days", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gang-gpus", type=int, default=4096, choices=(4096, 8192))
    args = parser.parse_args()
    path = trace_for(args.gang_gpus, args.days, Path(tempfile.mkdtemp(prefix="failures-sweep-")))
    restart = parse_duration(args.restart, "--restart")
    hours = args.days * 24
    expected = hours * 3600 / MTBF
    base = run(path, args.days, restart, None, False, args.seed)
    print(json.dumps({"run": "no failures", "restart": args.restart, **base}))
    for text in args.intervals.split(","):
        interval = parse_duration(text, "--intervals")
        got = run(path, args.days, restart, interval, True, args.seed)
        per_hour = GANG_GPUS / FLEET_GPUS / (MTBF / 3600)  # failures an hour that hit a gang
        model = base["goodput"] - per_hour * args.gang_gpus * (interval / 2 + restart) / 3600 / FLEET_GPUS
        seen = got["failures"]
        scaled = base["goodput"] - (base["goodput"] - got["goodput"]) * expected / seen if seen else None
        row = {"run": f"ckpt {text}", "restart": args.restart, "gang_gpus": args.gang_gpus, **got}
        print(json.dumps({**row, "expected_failures": expected, "scaled_goodput": scaled, "model": model}))


if __name__ == "__main__":
    main()
