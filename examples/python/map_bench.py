"""Titus's map from Python: what a task costs, and a job that one rank owns.

    python3 examples/python/map_bench.py overhead [--tasks 100000]
    titus launch -n 2 -- python3 examples/python/map_bench.py spin [--tasks 10000 --ms 1]

`overhead`: one rank maps a function that does nothing over N items; prints the time per
task. `spin`: rank 0 owns N tasks of a busy loop of `--ms` ms, the other ranks none;
prints the job's efficiency (the work over ranks x the map's time) and the map's time
against the work alone. Rank 0 prints one JSON line.
"""

import argparse
import json
import time

import titus


def nothing(x):
    return x


def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
    return ms


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["overhead", "spin"])
    p.add_argument("--tasks", type=int, default=None)
    p.add_argument("--ms", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    with titus.Runtime() as rt:
        if a.mode == "overhead":
            n = a.tasks or 100_000
            items = list(range(n)) if rt.rank == 0 else []
            rt.map(nothing, items[:1000])  # warm: imports, first pickles
            best = None
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                out = rt.map(nothing, items)
                dt = time.perf_counter() - t0
                assert out == items
                best = dt if best is None else min(best, dt)
            if rt.rank == 0:
                print(json.dumps({"mode": "overhead", "tasks": n, "ranks": rt.size,
                                  "seconds": best, "us_per_task": best / n * 1e6}))
        else:
            n = a.tasks or 10_000
            items = [a.ms] * n if rt.rank == 0 else []
            work = n * a.ms / 1000
            runs = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                out = rt.map(spin, items)
                dt = time.perf_counter() - t0
                assert out == items
                runs.append(dt)
            if rt.rank == 0:
                dt = sorted(runs)[len(runs) // 2]
                print(json.dumps({"mode": "spin", "tasks": n, "ms": a.ms, "ranks": rt.size,
                                  "seconds": dt, "efficiency": work / (rt.size * dt),
                                  "runs_s": runs, "stolen": rt.stats["tasks_ran_elsewhere"]}))


if __name__ == "__main__":
    main()
