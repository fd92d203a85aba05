"""The Cantera cells of `cantera_cells.py`, balanced by Titus and by the schedulers Python
users reach for, in one run and one table: Titus (2 ranks under `titus launch`),
`balancer="none"`, mpi4py.futures' `MPIPoolExecutor` (2 workers under `mpirun`), Dask
distributed (a local cluster of 2 single-threaded workers) and `multiprocessing.Pool(2)`.

Every row runs the same cells and steps, and its states must equal the sequential run's
bit for bit. A row reports its wall time for the steps (each launcher's start-up
excluded), the speed-up over the sequential run and the nominal efficiency (sequential
time / (2 x its time)). A row whose package is missing says so and is skipped.

    python3 examples/python/side_by_side.py [--nx 24 --ny 8 --steps 6 --dt 1e-3] [--json]

A benchmark program, not a test: the figures move with the machine.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cantera_cells as cells  # noqa: E402

WORKERS = 2


def grid(a):
    """Every cell's start, in index order."""
    return [cells.initial_state(c // a.ny, a.nx, a.fuel) for c in range(a.nx * a.ny)]


def steps(map_fn, states, a):
    """`a.steps` steps of every cell through `map_fn`; the states and the time."""
    t0 = time.perf_counter()
    for _ in range(a.steps):
        states = list(map_fn(cells.advance, [(s, a.dt) for s in states]))
    return states, time.perf_counter() - t0


def digest(states):
    """The states' bytes, to compare runs across processes."""
    return b"".join(np.asarray(s, dtype=np.float64).tobytes() for s in states).hex()


def args_of(a):
    return ["--nx", str(a.nx), "--ny", str(a.ny), "--steps", str(a.steps), "--dt", str(a.dt), "--fuel", a.fuel]


def titus_rows(a):
    """Titus and `none`: cantera_cells.py under titus launch (it checks bit for bit)."""
    launcher = shutil.which("titus") or str(HERE.parents[1] / "target/release/titus")
    cmd = [launcher, "launch", "-n", str(WORKERS), "--no-prefix", "--", sys.executable,
           str(HERE / "cantera_cells.py"), *args_of(a), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"side_by_side: titus launch failed: {p.stdout}{p.stderr}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return [("Titus (smallworld)", r["titus_s"], r["bit_for_bit"]),
            ('Titus balancer="none"', r["none_s"], r["bit_for_bit"])]


def pool_row(a, want):
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        pool.map(cells.advance, [(s, a.dt) for s in grid(a)[:WORKERS]])  # warm the workers
        got, t = steps(lambda f, xs: pool.map(f, xs), grid(a), a)
    return ("multiprocessing.Pool(2)", t, digest(got) == want)


def dask_row(a, want):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        return ("Dask distributed, 2 workers", None, "dask[distributed] is not installed")
    with LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.gather(client.map(cells.advance, [(s, a.dt) for s in grid(a)[:WORKERS]], pure=False))
        got, t = steps(lambda f, xs: client.gather(client.map(f, xs, pure=False)), grid(a), a)
    return ("Dask distributed, 2 workers", t, digest(got) == want)


def mpipool_row(a, want):
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return ("mpi4py MPIPoolExecutor, 2 workers", None, "mpi4py is not installed")
    mpirun = shutil.which("mpirun")
    if not mpirun:
        return ("mpi4py MPIPoolExecutor, 2 workers", None, "no mpirun")
    cmd = [mpirun, "--oversubscribe", "-n", str(WORKERS + 1)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [sys.executable, "-m", "mpi4py.futures", str(pathlib.Path(__file__)), "--mpipool-child", *args_of(a)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"side_by_side: the MPIPoolExecutor run failed: {p.stdout}{p.stderr}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return ("mpi4py MPIPoolExecutor, 2 workers", r["seconds"], r["digest"] == want)


def mpipool_child(a):
    """Under `mpirun -n 3 python3 -m mpi4py.futures`: the root maps over the 2 workers."""
    from mpi4py.futures import MPIPoolExecutor

    with MPIPoolExecutor() as ex:
        list(ex.map(cells.advance, [(s, a.dt) for s in grid(a)[:WORKERS]]))
        got, t = steps(lambda f, xs: ex.map(f, xs), grid(a), a)
    print(json.dumps({"seconds": t, "digest": digest(got)}))


def main():
    p = cells.grid_parser(__doc__)
    p.add_argument("--mpipool-child", action="store_true", help=argparse.SUPPRESS)
    a = cells.parse_grid(p)
    if a.mpipool_child:
        return mpipool_child(a)

    want_states, seq_s = steps(map, grid(a), a)
    want = digest(want_states)
    rows = titus_rows(a) + [mpipool_row(a, want), dask_row(a, want), pool_row(a, want)]
    table = []
    for name, t, same in rows:
        if t is None:
            table.append({"row": name, "skipped": same})
            continue
        table.append({"row": name, "seconds": t, "speedup": seq_s / t,
                      "nominal_efficiency": seq_s / (WORKERS * t), "bit_for_bit": same})
    if a.json:
        print(json.dumps({"cells": a.nx * a.ny, "steps": a.steps, "sequential_s": seq_s, "rows": table}))
    else:
        print(f"{a.nx} x {a.ny} cells, {a.steps} steps of {a.dt:g} s ({a.fuel}); sequential {seq_s:.3f} s; "
              f"{WORKERS} workers each")
        print(f"{'row':<36} {'seconds':>8} {'speed-up':>9} {'nominal eff.':>13}  bit for bit")
        for r in table:
            if "skipped" in r:
                print(f"{r['row']:<36} skipped: {r['skipped']}")
            else:
                print(f"{r['row']:<36} {r['seconds']:>8.3f} {r['speedup']:>9.2f} "
                      f"{r['nominal_efficiency']:>13.3f}  {'yes' if r['bit_for_bit'] is True else 'NO'}")
    if any(r.get("bit_for_bit") is False for r in table):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
