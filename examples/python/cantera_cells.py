"""Real chemistry through Titus: a 2-D grid of Cantera reactors crossed by an ignition
front.

Each cell is a constant-pressure reactor of GRI-Mech 3.0 (`gri30.yaml`, shipped with
Cantera) holding a methane-air (or hydrogen-air) mixture. A hot band along x = 0 cools
towards the far side, so cells ignite one column after another: the costly, stiff cells
are a front that crosses the grid over the steps. Every step advances every cell by dt;
the cells are keyed by their index, so each step's measured costs predict the next's.

Rank r owns a block of columns. The states come back to their owners and are compared
bit for bit with this rank's sequential run of its own cells (a cell's integration is
the same wherever it runs). Rank 0 prints the nominal efficiency (the job's sequential
time over ranks x Titus's time), the speed-up over `balancer="none"`, and the most any
balancer could reach over `none`: the slowest rank's own sequential time over the mean
(`speedup_bound`; the grid's defaults give about 1.6, since the front stays on rank 0's
columns for most steps).

    titus launch -n 2 -- python3 examples/python/cantera_cells.py [--nx 24 --ny 8 --steps 6] [--repeat 3]

`--repeat N` runs Titus and `none` N times each, one after the other, and reports the
median of the N speed-ups: on a machine whose speed drifts, a pair run back to back
compares better than two lone runs.
"""

import argparse
import json
import time

import numpy as np

import titus

_gas = None


def _solution():
    """This process's gri30 mixture object (loaded once; tasks run on its one worker)."""
    global _gas
    if _gas is None:
        import cantera as ct

        _gas = ct.Solution("gri30.yaml")
    return _gas


def advance(task):
    """One cell, one step: (state, dt) -> the state after dt. A state is
    [T, P, Y_0 .. Y_52]."""
    import cantera as ct

    state, dt = task
    gas = _solution()
    gas.TPY = state[0], state[1], state[2:]
    # (The reactor works on the process's one mixture object: no copy per cell.)
    reactor = ct.IdealGasConstPressureReactor(gas, clone=False)
    net = ct.ReactorNet([reactor])
    net.advance(dt)
    phase = reactor.phase
    return np.concatenate(([phase.T, phase.P], phase.Y))


def initial_state(ix, nx, fuel):
    """The cell's start: the mixture at 1 atm, hot at x = 0 and cooler along x."""
    gas = _solution()
    t = 1500.0 - 500.0 * ix / max(nx - 1, 1)
    gas.TP = t, 101325.0
    gas.set_equivalence_ratio(1.0, fuel, "O2:1.0, N2:3.76")
    return np.concatenate(([gas.T, gas.P], gas.Y))


def my_cells(rank, size, nx, ny):
    """This rank's block of columns: cell indices (ix * ny + iy)."""
    cols = np.array_split(np.arange(nx), size)[rank]
    return [int(ix) * ny + iy for ix in cols for iy in range(ny)]


def run(rt, cells, states, steps, dt):
    """Every step through `rt.map`; the states after each step, and the time."""
    t0 = time.perf_counter()
    for _ in range(steps):
        states = rt.map(advance, [(s, dt) for s in states], keys=cells)
    return states, time.perf_counter() - t0


def grid_parser(doc):
    """The grid's flags (this program's, and `side_by_side.py`'s)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--nx", type=int, default=24)
    p.add_argument("--ny", type=int, default=8)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--dt", type=float, default=1e-3)
    p.add_argument("--fuel", default="CH4", choices=["CH4", "H2"])
    p.add_argument("--json", action="store_true")
    return p


def parse_grid(p):
    """`p`'s arguments, the grid's checked."""
    a = p.parse_args()
    if a.nx < 1 or a.ny < 1 or a.steps < 1 or not a.dt > 0 or getattr(a, "repeat", 1) < 1:
        p.error("--nx, --ny, --steps and --repeat must be at least 1, --dt above 0")
    return a


def main():
    p = grid_parser(__doc__)
    p.add_argument("--repeat", type=int, default=1,
                   help="pairs of Titus and none runs (the median speed-up is reported)")
    a = parse_grid(p)

    with titus.Runtime() as rt:
        rank, size = rt.rank, rt.size
        cells = my_cells(rank, size, a.nx, a.ny)
        start = [initial_state(c // a.ny, a.nx, a.fuel) for c in cells]
        # The sequential reference: this rank's own cells, one after another.
        t0 = time.perf_counter()
        want = start
        for _ in range(a.steps):
            want = [advance((s, a.dt)) for s in want]
        seqs = rt.allgather(time.perf_counter() - t0)
        seq_s = sum(seqs)
    pairs, same = [], True
    for _ in range(a.repeat):
        with titus.Runtime() as rt:
            got, titus_s = run(rt, cells, start, a.steps, a.dt)
            stats = rt.stats
        with titus.Runtime(balancer="none") as rt:
            got_none, none_s = run(rt, cells, start, a.steps, a.dt)
            same = same and all(np.array_equal(g, w) for g, w in zip(got, want)) and all(
                np.array_equal(g, w) for g, w in zip(got_none, want)
            )
            all_same = all(rt.allgather(same))
            # The job's times: its slowest rank's.
            pairs.append(tuple(max(t) for t in zip(*rt.allgather((titus_s, none_s)))))
    # The median pair by its speed-up.
    titus_s, none_s = sorted(pairs, key=lambda p: p[1] / p[0])[len(pairs) // 2]
    burnt = sum(s[0] > 1800.0 for s in got)
    report = {
        "ranks": size,
        "cells": a.nx * a.ny,
        "steps": a.steps,
        "fuel": a.fuel,
        "sequential_s": seq_s,
        "titus_s": titus_s,
        "none_s": none_s,
        "nominal_efficiency": seq_s / (size * titus_s),
        "speedup_over_none": none_s / titus_s,
        "speedup_bound": size * max(seqs) / seq_s,
        "speedup_runs": [n / t for t, n in pairs],
        "bit_for_bit": all_same,
        "cells_burnt_here": int(burnt),
        "tasks_ran_elsewhere": stats["tasks_ran_elsewhere"],
    }
    if rank == 0:
        if a.json:
            print(json.dumps(report))
        else:
            print(
                f"{size} ranks, {a.nx} x {a.ny} cells, {a.steps} steps of {a.dt:g} s ({a.fuel}): "
                f"sequential {seq_s:.3f} s, Titus {titus_s:.3f} s, none {none_s:.3f} s; "
                f"nominal efficiency {report['nominal_efficiency']:.3f}, "
                f"speed-up over none {report['speedup_over_none']:.2f} "
                f"(a perfect balance: {report['speedup_bound']:.2f}); "
                f"results {'equal the sequential run' if all_same else 'DIFFER from the sequential run'}"
            )
    if not all_same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
