"""What `gpufleet simulate` decided, job by job, to check that a speed change changed no decision.

    python benchmarks/sim_decisions.py record before.json --days 1            # on the old code
    python benchmarks/sim_decisions.py record after.json --days 1             # on the new code
    python benchmarks/sim_decisions.py compare before.json after.json         # exit 1 on any difference

`record` runs the simulation of the Philly trace (as `gpufleet simulate --trace philly` finds it)
and writes every job's first start, end, restarts and lost GPU-seconds, the faults drawn and the
number of scheduling cycles, with the CPU time of the simulation alone (`time.process_time`, the
figure to compare on a machine shared with other work). `--profile FILE` writes a cProfile of the
run (CPU time). To compare two versions of the code side by side, run each from its own git worktree
with `PYTHONPATH=WORKTREE/src`. Speed changes must leave `compare` silent; a difference is a bug.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
import time
from pathlib import Path

from gpufleet.sim import jobfleet, jobsim, philly


def record(args: argparse.Namespace) -> int:
    trace = philly.load(philly.resolve("philly", args.data_dir))
    pools = jobfleet.fleet_of_gpus(args.gpus)
    begin = args.start_day * 86400.0 if args.start_day is not None else trace.busy_start()
    window = trace.window(begin, args.days)
    queues = jobfleet.queues_for(args.policy, pools, window, None)
    options = jobsim.SimOptions(
        policy=args.policy, checkpoint_interval=args.checkpoint_interval, gpu_mtbf_seconds=args.mtbf
    )
    profile = cProfile.Profile(time.process_time) if args.profile else None
    cpu = time.process_time()
    if profile is not None:
        profile.enable()
    result = jobsim.simulate(trace, pools, queues, begin=begin, days=args.days, options=options)
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    cpu = time.process_time() - cpu
    jobs = {name: [r.start, r.end, r.restarts, r.lost_gpu_seconds] for name, r in sorted(result.jobs.items())}
    out = {"jobs": jobs, "faults": result.faults, "cycles": result.cycles, "cpu_seconds": round(cpu, 2)}
    Path(args.out).write_text(json.dumps(out, indent=0))
    restarts = sum(r.restarts for r in result.jobs.values())
    print(
        f"{len(jobs)} jobs, {cpu:.2f} s CPU, {result.cycles} cycles, faults {result.faults}, "
        f"{restarts} restarts"
    )
    return 0


def compare(args: argparse.Namespace) -> int:
    a = json.loads(Path(args.before).read_text())
    b = json.loads(Path(args.after).read_text())
    differ = sorted(n for n in a["jobs"].keys() | b["jobs"].keys() if a["jobs"].get(n) != b["jobs"].get(n))
    print(
        f"{len(a['jobs'])} and {len(b['jobs'])} jobs, {len(differ)} differ; faults {a['faults']} and "
        f"{b['faults']}; cycles {a['cycles']} and {b['cycles']}; CPU {a['cpu_seconds']} s and "
        f"{b['cpu_seconds']} s"
    )
    for name in differ[:20]:
        print(f"  {name}: {a['jobs'].get(name)} -> {b['jobs'].get(name)}")
    return 1 if differ or a["faults"] != b["faults"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run a simulation and write what it decided")
    rec.add_argument("out")
    rec.add_argument("--gpus", type=int, default=2048)
    rec.add_argument("--days", type=float, default=1.0)
    rec.add_argument("--start-day", type=float, default=None, help="default: the trace's first busy day")
    rec.add_argument("--policy", default="gpufleet", choices=jobfleet.POLICIES)
    rec.add_argument("--checkpoint-interval", type=float, default=None, help="seconds")
    rec.add_argument("--mtbf", type=float, default=None, help="the fleet's GPU MTBF in seconds")
    rec.add_argument("--data-dir", type=Path, default=None)
    rec.add_argument("--profile", default=None, help="write a cProfile (CPU time) here")
    rec.set_defaults(run=record)
    cmp = commands.add_parser("compare", help="compare two records; exit 1 if any job differs")
    cmp.add_argument("before")
    cmp.add_argument("after")
    cmp.set_defaults(run=compare)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
