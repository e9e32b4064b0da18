"""Claim (c): how much more small-inference work a fleet does with MIG pools than with whole GPUs.

The same stream of small jobs (a trace with a `mig` column, from make_traces.py) runs twice through
`gpufleet simulate`'s engine (`sim.jobsim.simulate`: the controllers and scheduling core of
`gpufleet up` on the twin) on 16 H100s for the trace's 8 hours:

- MIG: 2 nodes whose GPUs are partitioned with LAYOUT; each job holds the one instance it asks for;
- whole GPUs: 2 plain nodes; each job holds a whole GPU, of which it uses its instance's share.

Useful utilisation = the GPU compute jobs use (a job's instance's share of a GPU: 1g = 1/7, while it
runs) over the fleet's compute, over the window. With MIG it is what the simulator measures (a MIG pod
counts its share); with whole GPUs the simulator measures allocation (1 a job) and the useful part is
each job's share of it. The factor is MIG's over whole GPUs'. The stream is more than whole GPUs can
take, so a queue grows there; the run stops at the window's end (jobs left waiting are not run).

`--nodes N` scales the fleet and the stream together: N nodes of each kind and N / 2 times the jobs an
hour (make_traces.mig_trace, same seed, drawn into a temporary directory); the default, 2, replays the
committed traces. `--hours H` cuts the stream at H hours instead of 8 (to estimate a run's CPU cost);
`--only TRACE` runs one of the two traces.

Run from the repository root: `.venv/bin/python benchmarks/claims/mig_factor.py [--nodes N] [--json]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from gpufleet.api.meta import ObjectMeta
from gpufleet.api.pool import GPUPool, GPUPoolSpec, Sharing
from gpufleet.sim import jobfleet, jobreport, jobsim, philly

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # make_traces sits beside this script; benchmarks/ is not a package
import make_traces  # noqa: E402

NODES = 2
"""The fleet the committed traces are drawn for (each kind: 2 nodes, 16 GPUs)."""
CASES = {
    "mig-1g.csv": ["1g.10gb"] * 7,
    "mig-mix.csv": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
}
"""Trace -> the MIG layout of every GPU of the MIG fleet (valid H100 layouts of 7 compute slices)."""
STREAMS = {
    "mig-1g.csv": (150.0, make_traces.MIG_ONLY_1G),
    "mig-mix.csv": (85.0, make_traces.MIG_MIX),
}
"""Trace -> (jobs an hour on NODES nodes, mix): what make_traces.py draws it with."""


HOURS = 8.0
"""The window the committed traces are drawn for."""


def trace_path(name: str, nodes: int, folder: Path, hours: float = HOURS) -> Path:
    """The committed trace at NODES nodes and HOURS; for another fleet the same stream scaled with it
    (nodes / NODES times the jobs an hour, same seed), for another window the same stream cut at
    `hours`, drawn into `folder`."""
    if nodes == NODES and hours == HOURS:
        return HERE / "traces" / name
    rate, mix = STREAMS[name]
    path = folder / f"{Path(name).stem}-{nodes}n-{hours:g}h.csv"
    rows = make_traces.mig_trace(hours=hours, jobs_per_hour=rate * nodes / NODES, mix=mix)
    make_traces.write(path, rows, mig=True)
    return path


def mig_fleet(layout: list[str], nodes: int = NODES) -> list[GPUPool]:
    sharing = Sharing(mig={"*": layout})
    spec = GPUPoolSpec(gpu_model="H100-80GB", gpus_per_node=8, nodes=nodes, sharing=sharing)
    return [GPUPool(metadata=ObjectMeta(name="mig"), spec=spec)]


def useful(result: jobsim.SimResult, share: dict[str, float]) -> float:
    """GPU compute used by the jobs over the fleet's, over the window: each job's share while it ran."""
    end = result.window_end
    used = 0.0
    for name, record in result.jobs.items():
        if record.start is None:
            continue
        stop = min(record.end if record.end is not None else end, end)
        used += max(0.0, stop - record.start) * share[name]
    return used / ((end - result.begin) * result.capacity)


def progress(line: str) -> None:
    """The simulator's progress (simulated day, jobs finished, every 10 s) on stderr: runs take minutes."""
    print(line, file=sys.stderr, flush=True)


def run(trace: philly.Trace, pools: list[GPUPool], share: dict[str, float]) -> dict[str, float]:
    queues = jobfleet.queues_for("gpufleet", pools, trace)
    days = (trace.jobs[-1].submit + 1) / 86400  # the window: up to the last submission
    clock = time.process_time()
    options = jobsim.SimOptions(drain=False)
    result = jobsim.simulate(trace, pools, queues, days=days, options=options, progress=progress)
    summary = jobreport.summarise(result)
    waited = [r.start - r.submit for r in result.jobs.values() if r.start is not None]
    return {
        "jobs": len(trace.jobs),
        "finished_in_window": sum(1 for r in result.jobs.values() if r.end is not None),
        "never_started": sum(1 for r in result.jobs.values() if r.start is None),
        "mean_wait_h_of_started": sum(waited) / len(waited) / 3600 if waited else 0.0,
        "allocated": summary.utilisation,
        "useful": useful(result, share),
        "cpu_s": time.process_time() - clock,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=NODES, help="nodes of each fleet; the stream scales too")
    parser.add_argument(
        "--hours", type=float, default=HOURS, help="the window (a shorter one costs less CPU)"
    )
    parser.add_argument("--only", choices=sorted(CASES), help="run this trace only")
    parser.add_argument("--json", action="store_true", help="one JSON line per trace")
    args = parser.parse_args()
    if args.nodes < 1:
        parser.error(f"--nodes must be at least 1, got {args.nodes}")
    if args.hours <= 0:
        parser.error(f"--hours must be positive, got {args.hours}")
    folder = Path(tempfile.mkdtemp(prefix="mig-factor-"))
    for name, layout in CASES.items():
        if args.only and name != args.only:
            continue
        trace = philly.load(trace_path(name, args.nodes, folder, args.hours))
        share = {j.name: jobfleet.mig_share(j.mig or "7g.80gb") for j in trace.jobs}
        whole = dataclasses.replace(trace, jobs=tuple(dataclasses.replace(j, mig=None) for j in trace.jobs))
        rows = {
            "mig": run(trace, mig_fleet(layout, args.nodes), share),
            "whole": run(whole, jobfleet.fleet_of_gpus(args.nodes * 8), share),
        }
        factor = rows["mig"]["useful"] / rows["whole"]["useful"]
        if args.json:
            head = {"trace": name, "nodes": args.nodes, "hours": args.hours, "layout": layout}
            print(json.dumps({**head, **rows, "factor": factor}), flush=True)
            continue
        print(f"{name}: layout {layout}, {len(trace.jobs)} jobs in {trace.jobs[-1].submit / 3600:.1f} h")
        for kind, r in rows.items():
            print(
                f"  {kind:5}: useful {r['useful']:.1%}, allocated {r['allocated']:.1%}, "
                f"{r['finished_in_window']} finished in the window, {r['never_started']} never started, "
                f"mean wait of started {r['mean_wait_h_of_started']:.2f} h ({r['cpu_s']:.0f} s CPU)"
            )
        print(f"  factor (useful, MIG over whole GPUs): {factor:.2f}")


if __name__ == "__main__":
    main()
