"""Where `gpufleet simulate`'s settle rounds and store writes go, to choose what to cut next.

    python benchmarks/sim_rounds.py --days 1                 # any option of `sim_decisions.py record`

Runs `sim_decisions.py record` (into a temporary file) with the runtime and the in-memory store
watched, then prints: settle calls and rounds, and per participant its CPU and the steps it took
although no one had written since its last step at that instant and it was not due (the steps a
kube-style "nothing to do" could skip); the writes by method, kind and calling function (a batch
counts each object it holds; a single delete is not counted); and the
writes of an object that it had already had in the same settle (one instant), by kind. Watching
costs CPU: take CPU figures from `sim_decisions.py`, not from here.
"""

from __future__ import annotations

import inspect
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sim_decisions

from gpufleet.store.memory import MemoryStore
from gpufleet.twin import driver

rounds = Counter[str]()
cpu: defaultdict[str, float] = defaultdict(float)
idle_steps = Counter[str]()
writes = Counter[tuple[str, str, str]]()
seen = Counter[tuple[str, str | None, str, int]]()


def watched_settle(self: driver.Runtime) -> float | None:
    """`Runtime.settle`, stepping the same participants in the same order, with counts."""
    now = self.clock.now()
    rounds["settle calls"] += 1
    last: dict[int, tuple[int, float | None]] = {}  # participant -> (writes before its step, its wake)
    for _ in range(driver.MAX_ROUNDS):
        rounds["rounds"] += 1
        before = self.store.writes_by_this_thread()
        wakes = []
        for index, participant in enumerate(self.participants):
            name = type(participant).__name__
            mark = self.store.writes_by_this_thread()
            previous = last.get(index)
            if previous is not None and previous[0] == mark and (previous[1] is None or previous[1] > now):
                idle_steps[name] += 1
            started = time.process_time()
            wake = participant.step(now)
            cpu[name] += time.process_time() - started
            last[index] = (mark, wake)
            wakes.append(wake)
        due = [w for w in wakes if w is not None]
        if self.store.writes_by_this_thread() == before and all(w > now for w in due):
            return min(due) if due else None
    raise driver.LivelockError(f"participants did not settle at t={now} after {driver.MAX_ROUNDS} rounds")


def watch_writes(method: str) -> None:
    original: Callable[..., Any] = getattr(MemoryStore, method)

    def watched(self: MemoryStore, obj: Any, *args: Any, **kwargs: Any) -> Any:
        caller = inspect.stack(context=0)[1]
        writes[(method, obj.kind, f"{Path(caller.filename).name}:{caller.function}")] += 1
        seen[(obj.kind, obj.namespace, obj.name, rounds["settle calls"])] += 1
        return original(self, obj, *args, **kwargs)

    setattr(MemoryStore, method, watched)


def watch_batches(method: str) -> None:
    """A batch (`apply_many`, `delete_many`) counts one write per object it holds."""
    original: Callable[..., Any] = getattr(MemoryStore, method)

    def watched(self: MemoryStore, objs: Any, *args: Any, **kwargs: Any) -> Any:
        caller = inspect.stack(context=0)[1]
        for obj in objs:
            writes[(method, obj.kind, f"{Path(caller.filename).name}:{caller.function}")] += 1
            seen[(obj.kind, obj.namespace, obj.name, rounds["settle calls"])] += 1
        return original(self, objs, *args, **kwargs)

    setattr(MemoryStore, method, watched)


def main(argv: list[str]) -> int:
    driver.Runtime.settle = watched_settle  # type: ignore[method-assign]
    for method in ("create", "update", "update_status"):
        watch_writes(method)
    for method in ("apply_many", "delete_many"):
        watch_batches(method)
    with tempfile.TemporaryDirectory() as tmp:
        code = sim_decisions.main(["record", str(Path(tmp) / "decisions.json"), *argv])
    print(f"{rounds['settle calls']} settle calls, {rounds['rounds']} rounds")
    for name in cpu:
        print(f"  {name}: {cpu[name]:.2f} s CPU (watched), {idle_steps[name]} steps with nothing new")
    print(f"writes: {sum(writes.values())} in all")
    print("writes (method, kind, caller):")
    for key, count in writes.most_common():
        print(f"  {count:7d} {key}")
    again = Counter[str]()
    for (kind, _, _, _), count in seen.items():
        again[kind] += count - 1
    print("writes of an object already written in the same settle:", dict(again.most_common()))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
