"""Module-level task functions for the tests (pickled by reference, imported on every
rank that runs them) and a script the multi-process tests launch."""

import os
import signal
import sys
import time


def square(x):
    return x * x


def spin(ms):
    """Busy for `ms` milliseconds; returns `ms`."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
    return ms


def in_frame(x):
    """Whether array `x` views the frame it arrived in (its buffer out of band), not a
    buffer of its own size (pickled in band, or copied)."""
    root = x
    while True:
        base = root.obj if isinstance(root, memoryview) else getattr(root, "base", None)
        if base is None:
            return isinstance(root, bytearray) and len(root) > x.nbytes
        root = base


def bump(x):
    """An array plus one, added in place (so the task's array must be writable), and
    whether it viewed the frame it arrived in; anything else as it came."""
    if hasattr(x, "flags"):
        viewed = in_frame(x)
        x += 1
        return (x, viewed)
    return (x, None)


def raise_on_three(x):
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


def unpicklable_result(x):
    return lambda: x


def exit_rank_one(x):
    """Kills the rank that runs item 0 of rank 1's items (a dead peer)."""
    if x == "die":
        os._exit(3)
    return spin(2)


def signal_to_self(rt, sig):
    """Rank 0 sends itself `sig` a second into a map; each rank prints how its map ended."""
    import threading

    import titus

    if rt.rank == 0:
        threading.Timer(1.0, os.kill, (os.getpid(), sig)).start()
    t0 = time.perf_counter()

    def said(what):
        print(f"rank {rt.rank}: {what} after {time.perf_counter() - t0:.1f} s", flush=True)

    try:
        rt.map(spin, [50] * 400 if rt.rank == 0 else [])
    except KeyboardInterrupt:
        said("KeyboardInterrupt")
    except SystemExit as e:
        said(f"SystemExit({e.code})")
        raise
    except titus.Error as e:
        said(type(e).__name__)


def main():
    """Under a launcher: every rank maps; rank 0 owns the work. Prints one line a rank."""
    import titus

    mode = sys.argv[1]
    provider = sys.argv[2] if len(sys.argv) > 2 else None
    options = {"provider": provider} if provider else {}
    if mode == "comm":
        # The ranks of an mpi4py communicator, addresses exchanged through it.
        from mpi4py import MPI

        options["comm"] = MPI.COMM_WORLD
        mode = "spin"
    with titus.Runtime(**options) as rt:
        if mode == "spin":
            items = [1.0] * 200 if rt.rank == 0 else []
            out = rt.map(spin, items)
            assert out == items, out
            s = rt.stats
            print(f"rank {rt.rank} of {rt.size}: ran {s['tasks_run']}, "
                  f"ran elsewhere {s['tasks_ran_elsewhere']}", flush=True)
        elif mode == "steps":
            # Two maps of the same keyed cells, rank 0's twenty times the costlier: the
            # second map's start predicts from the first's measured costs.
            for _ in range(2):
                keys = [1000 * rt.rank + i for i in range(24)]
                ms = [4.0 if rt.rank == 0 else 0.2] * 24
                assert rt.map(spin, ms, keys=keys) == ms
            print(f"rank {rt.rank}: stepped", flush=True)
        elif mode == "raise":
            try:
                rt.map(raise_on_three, range(8) if rt.rank == 1 else [])
            except titus.TaskError as e:
                print(f"rank {rt.rank}: TaskError {e.exc_type}", flush=True)
        elif mode in ("interrupt", "term"):
            # Ctrl-C (SIGTERM) on rank 0 a second into a 10 s map: every rank stops at
            # once; rank 0 with KeyboardInterrupt (SystemExit(143), which it re-raises).
            signal_to_self(rt, signal.SIGINT if mode == "interrupt" else signal.SIGTERM)
        elif mode == "kill":
            items = (["die"] + [1] * 50) if rt.rank == 1 else [1] * 50
            t0 = time.perf_counter()
            try:
                rt.map(exit_rank_one, items)
            except titus.Error as e:
                print(f"rank {rt.rank}: Error after {time.perf_counter() - t0:.1f} s: "
                      f"{type(e).__name__}", flush=True)
                os._exit(0)


if __name__ == "__main__":
    main()
