"""Titus's map from Python: what a task costs, and a job that one rank owns.

    python3 examples/python/map_bench.py overhead [--tasks 100000]
    titus launch -n 2 -- python3 examples/python/map_bench.py spin [--tasks 10000 --ms 1] [--dask]
    python3 examples/python/map_bench.py arrays [--tasks 2000 --kib 32]

`overhead`: one rank maps a function that does nothing over N items; prints the time per
task. `spin`: rank 0 owns N tasks of a busy loop of `--ms` ms, the other ranks none;
prints the job's efficiency (the work over ranks x the map's time) and the map's time
against the work alone; with `--dask`, rank 0 then runs the same tasks on a Dask
distributed cluster of as many one-thread worker processes as ranks, and prints its
efficiency beside Titus's. `arrays`: one rank maps the identity over N numpy arrays of
`--kib` KiB, their buffers out of band both ways (the default), then pickled in band;
prints the time per task of each. Rank 0 prints one JSON line.
"""

import argparse
import json
import time

import titus

try:
    import numpy
except ImportError:  # (only the arrays mode needs it)
    numpy = None


def nothing(x):
    return x


def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
    return ms


def dask_spin(items, workers, repeat):
    """The median time of Dask distributed mapping `spin` over `items` on a local cluster
    of `workers` one-thread processes (started and warmed before the clock)."""
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.gather(client.map(spin, items[:workers], pure=False))
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = client.gather(client.map(spin, items, pure=False))
            runs.append(time.perf_counter() - t0)
            assert out == items
    return sorted(runs)[len(runs) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["overhead", "spin", "arrays"])
    p.add_argument("--tasks", type=int, default=None)
    p.add_argument("--ms", type=float, default=1.0)
    p.add_argument("--kib", type=int, default=32)
    p.add_argument("--dask", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    options = {}
    if a.mode == "arrays":
        if numpy is None:
            p.error("the arrays mode needs numpy")
        if not 1 <= a.kib <= 56:
            p.error("--kib: 1 to 56 (a result travels in one 64 KiB chunk)")
        room = a.kib * 1024 + 1024
        options = {"max_payload": room, "max_result": room, "shared_capacity": 128}
    row = None
    with titus.Runtime(**options) as rt:
        if a.mode == "arrays":
            n = a.tasks or 2000
            arrays = [numpy.full(a.kib * 128, float(i)) for i in range(n)] if rt.rank == 0 else []
            row = {"mode": "arrays", "tasks": n, "kib": a.kib, "ranks": rt.size}
            for name, out_of_band in [("out_of_band", True), ("in_band", False)]:
                titus._OUT_OF_BAND = out_of_band
                rt.map(nothing, arrays[:100])  # warm
                best = None
                for _ in range(a.repeat):
                    t0 = time.perf_counter()
                    out = rt.map(nothing, arrays)
                    dt = time.perf_counter() - t0
                    best = dt if best is None else min(best, dt)
                assert all((o == x).all() for o, x in zip(out, arrays))
                row[f"{name}_us_per_task"] = best / n * 1e6
            if rt.rank == 0:
                print(json.dumps(row))
        elif a.mode == "overhead":
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
                row = {"mode": "spin", "tasks": n, "ms": a.ms, "ranks": rt.size,
                       "seconds": dt, "efficiency": work / (rt.size * dt),
                       "runs_s": runs, "stolen": rt.stats["tasks_ran_elsewhere"]}
                if not a.dask:
                    print(json.dumps(row))
    if a.mode == "spin" and a.dask and row:
        # (After the runtime closed: every rank leaves together, and the others would
        # wait past the bootstrap's timeout for this one.)
        dask_s = dask_spin(items, row["ranks"], a.repeat)
        row.update(dask_seconds=dask_s, dask_efficiency=work / (row["ranks"] * dask_s))
        print(json.dumps(row))


if __name__ == "__main__":
    main()
