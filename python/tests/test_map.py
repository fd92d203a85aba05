"""The titus package: a map's results, its errors, its figures and its memory in one
process; and the same maps as 2 processes under `titus launch` (node and tcp;ofi_rxm),
`mpirun` and, where a Slurm cluster answers, `srun`, including a raising task and a killed
rank."""

import os
import pathlib
import resource
import shutil
import subprocess
import sys

import pytest

import titus

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import tasks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def titus_bin():
    """The repository's `titus` command (TITUS_BIN, else a built one)."""
    for path in [os.environ.get("TITUS_BIN"), ROOT / "target/release/titus", ROOT / "target/debug/titus"]:
        if path and pathlib.Path(path).exists():
            return str(path)
    return shutil.which("titus") or pytest.skip("no titus command built")


@pytest.fixture(scope="module")
def rt():
    with titus.Runtime() as r:
        yield r


def test_every_result_is_fn_of_its_item(rt):
    assert (rt.rank, rt.size) == (0, 1)
    assert rt.map(tasks.square, range(1000)) == [x * x for x in range(1000)]
    assert rt.map(tasks.square, []) == []
    s = rt.stats
    for key in ["efficiency", "nominal_efficiency", "resolution_s", "steals",
                "tasks_stolen", "tasks_ran_elsewhere"]:
        assert key in s, key
    assert s["tasks_run"] == 0


def test_keys_carry_across_maps_and_a_key_given_twice_is_refused(rt):
    for step in range(3):
        out = rt.map(tasks.square, range(50), keys=[100 + i for i in range(50)],
                     costs=[1e-6] * 50, priorities=[0] * 50)
        assert out == [x * x for x in range(50)]
    with pytest.raises(titus.Error, match="key"):
        rt.map(tasks.square, range(3), keys=[7, 7, 8])
    with pytest.raises(titus.Error, match="2 keys for 3 items"):
        rt.map(tasks.square, range(3), keys=[1, 2])
    # The runtime goes on after a refused map.
    assert rt.map(tasks.square, [3]) == [9]


def test_a_raising_task_fails_the_map_with_its_type_message_and_traceback():
    with titus.Runtime() as rt:
        with pytest.raises(titus.TaskError) as info:
            rt.map(tasks.raise_on_three, range(8))
    e = info.value
    assert isinstance(e, titus.Error)
    assert e.exc_type == "ValueError"
    assert e.message == "bad item 3"
    assert "raise ValueError" in e.traceback_text


def test_what_cannot_be_pickled_is_named():
    with titus.Runtime() as rt:
        with pytest.raises(titus.Error, match="item 2 of rank 0 cannot be pickled"):
            rt.map(tasks.square, [1, 2, lambda: 3])
    with titus.Runtime() as rt:
        with pytest.raises(titus.Error, match="result of item 0 cannot be pickled"):
            rt.map(tasks.unpicklable_result, [1])


def test_bad_options_are_named():
    with pytest.raises(titus.Error, match="colour"):
        titus.Runtime(colour="blue")
    with pytest.raises(titus.Error, match="workers"):
        titus.Runtime(workers=0)


def test_a_traced_map_writes_each_task_s_span(tmp_path):
    import json
    trace = tmp_path / "trace"
    with titus.Runtime(trace=str(trace), workers=2) as rt:
        for n in [30, 7]:
            assert rt.map(tasks.square, range(n)) == [x * x for x in range(n)]
    lines = (trace / "titus-trace-rank0.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["epoch"] for r in records] == [0, 1]
    for r, n in zip(records, [30, 7]):
        spans = [span for worker in r["tasks"] for span in worker]
        assert len(spans) == r["stats"]["tasks_run"] == n
        assert len(r["keys"]) == n
        assert all(r["tasks_from_ns"] <= s[0] and s[0] + s[1] <= r["end_ns"] for s in spans)
    # A directory that cannot be made is named when the runtime opens.
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(titus.Error, match="trace directory"):
        titus.Runtime(trace=str(blocker / "sub"))


def test_numpy_arrays_travel_out_of_band():
    np = pytest.importorskip("numpy")
    items = [
        np.arange(1024, dtype=np.float64),           # contiguous, 8 KiB: out of band
        np.asfortranarray(np.ones((64, 32))),        # Fortran order: out of band
        np.arange(2048.0)[::2],                      # strided: pickled in band
        np.ones(10),                                 # small: in band, cheaper
        np.zeros(0),                                 # empty
        {"a": np.full(3, 2, dtype=np.int32)},        # an array inside another object
        7,
    ]
    with titus.Runtime(max_payload=1 << 16, max_result=1 << 15) as rt:
        out = rt.map(tasks.bump, items)
    (a, viewed_a), (f, viewed_f), (s, viewed_s), (o, viewed_o), (z, _), (d, _), (n, _) = out
    assert (viewed_a, viewed_f, viewed_s, viewed_o) == (True, True, False, False)
    assert (a == np.arange(1024) + 1).all() and a.dtype == np.float64
    assert (f == 2).all() and f.flags.f_contiguous
    assert (s == np.arange(2048.0)[::2] + 1).all() and (o == 2).all()
    assert z.shape == (0,) and n == 7 and (d["a"] == 2).all()
    # Results come back out of band too: writable views of what arrived, aligned.
    for r in (a, f):
        assert tasks.in_frame(r) and r.flags.writeable
        assert r.ctypes.data % 16 == 0
    assert not tasks.in_frame(o)  # (small: in band both ways)
    # A frame cut short is refused, not read past its end.
    _, parts = titus._frame(b"", np.ones(2048))
    whole = b"".join(bytes(p) for p in parts)
    with pytest.raises(Exception):
        titus._unframe(memoryview(bytearray(whole[:-8])), 0)


def test_a_thousand_maps_keep_memory_flat(rt):
    def rss_kib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(100):
        rt.map(tasks.square, range(20))
    before = rss_kib()
    for _ in range(1000):
        rt.map(tasks.square, range(20))
    assert rss_kib() - before < 8 * 1024, f"{before} KiB -> {rss_kib()} KiB"


def launch(n, mode, provider, timeout=120, env=None):
    cmd = [titus_bin(), "launch", "-n", str(n), "--no-prefix", "--timeout", str(timeout),
           "--", sys.executable, str(pathlib.Path(tasks.__file__)), mode]
    if provider:
        cmd.append(provider)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, env=env)


def providers():
    out = ["node"]
    if shutil.which("fi_info"):
        out.append("tcp;ofi_rxm")
    return out


@pytest.mark.parametrize("provider", providers())
def test_two_processes_share_one_rank_s_work(provider):
    p = launch(2, "spin", provider)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(2):
        assert f"rank {r} of 2: ran" in p.stdout, p.stdout + p.stderr
    # Rank 0 owned all 200 tasks; rank 1 stole some.
    assert "rank 1 of 2: ran 0," not in p.stdout, p.stdout


def test_keys_carry_measured_costs_into_the_next_map_s_pushes(tmp_path):
    import json
    p = launch(2, "steps", None, env={**os.environ, "TITUS_TRACE": str(tmp_path)})
    assert p.returncode == 0, p.stdout + p.stderr
    lines = (tmp_path / "titus-trace-rank0.jsonl").read_text().splitlines()
    pushed = [json.loads(line)["stats"]["tasks_pushed"] for line in lines]
    # The first map knows nothing of its cells; the second pushes rank 0's predicted
    # excess to rank 1 before anyone steals.
    assert pushed[0] == 0 and pushed[1] > 0, pushed


@pytest.mark.parametrize("provider", providers())
def test_a_raising_task_fails_every_rank(provider):
    p = launch(2, "raise", provider)
    assert p.returncode == 0, p.stdout + p.stderr
    # Both ranks fail with the task's own type, wherever it ran (thieves take it).
    for r in range(2):
        assert f"rank {r}: TaskError ValueError" in p.stdout, p.stdout + p.stderr


def test_ctrl_c_on_one_rank_stops_the_map_on_every_rank():
    p = launch(2, "interrupt", None, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = {l.split(":")[0]: l for l in p.stdout.splitlines() if l.startswith("rank ")}
    assert "KeyboardInterrupt" in lines.get("rank 0", ""), p.stdout + p.stderr
    assert "Error after" in lines.get("rank 1", ""), p.stdout + p.stderr
    for line in lines.values():
        assert float(line.split("after ")[1].split(" s")[0]) < 5, line


def test_sigterm_on_one_rank_ends_every_rank_cleanly():
    p = launch(2, "term", None, timeout=60)
    lines = {l.split(":")[0]: l for l in p.stdout.splitlines() if l.startswith("rank ")}
    assert "SystemExit(143)" in lines.get("rank 0", ""), p.stdout + p.stderr
    assert "Error after" in lines.get("rank 1", ""), p.stdout + p.stderr
    for line in lines.values():
        assert float(line.split("after ")[1].split(" s")[0]) < 5, line
    # Rank 0 left with its signal's status, through its own cleanup (no traceback).
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stdout + p.stderr


def mpirun():
    """`mpirun -n 2` where Open MPI is installed (as root it must be told so)."""
    if not shutil.which("mpirun"):
        return None
    cmd = ["mpirun", "--oversubscribe", "-n", "2"]
    return cmd + ["--allow-run-as-root"] if os.geteuid() == 0 else cmd


@pytest.mark.parametrize("mode", ["spin", "comm"])
def test_two_processes_under_mpirun(mode):
    """The launcher's ranks (`spin`), or an mpi4py communicator's (`comm`)."""
    cmd = mpirun() or pytest.skip("no mpirun")
    if mode == "comm":
        pytest.importorskip("mpi4py", reason="pip install mpi4py (.ci/test does)")
    p = subprocess.run(cmd + [sys.executable, str(pathlib.Path(tasks.__file__)), mode],
                       capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(2):
        assert f"rank {r} of 2: ran" in p.stdout, p.stdout + p.stderr


def slurm_answers():
    """Whether a Slurm cluster answers here (`sinfo` shows a partition up within 5 s):
    `deploy/slurm/one-node.sh start` makes this machine one."""
    if not shutil.which("srun"):
        return False
    try:
        p = subprocess.run(["sinfo", "--noheader", "--format=%a"], capture_output=True,
                           text=True, timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0 and "up" in p.stdout


@pytest.mark.parametrize("mpi", ["pmix", "none"])
def test_two_processes_under_srun(mpi):
    """Slurm's PMIx, or its variables alone (the rendezvous at the job's own port)."""
    if not slurm_answers():
        pytest.skip("no Slurm cluster answers here (sinfo)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TITUS_")}
    cmd = ["srun", f"--mpi={mpi}", "--overcommit", "--kill-on-bad-exit=1", "--time=2",
           "--ntasks=2", sys.executable, str(pathlib.Path(tasks.__file__)), "spin"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(2):
        assert f"rank {r} of 2: ran" in p.stdout, p.stdout + p.stderr


def test_a_killed_rank_is_an_error_on_the_other_within_the_bound():
    p = launch(2, "kill", None, timeout=60)
    line = [l for l in p.stdout.splitlines() if l.startswith("rank 0: Error after")]
    assert line, p.stdout + p.stderr
    seconds = float(line[0].split("after ")[1].split(" s")[0])
    assert seconds < 15, line


def cantera_cells(*launcher):
    script = ROOT / "examples/python/cantera_cells.py"
    cmd = [*launcher, sys.executable, str(script), "--nx", "4", "--ny", "2", "--steps", "2", "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("ranks", [1, 2])
def test_cantera_cells_equal_the_sequential_run(ranks):
    pytest.importorskip("cantera", reason="pip install cantera numpy (.ci/test does)")
    launcher = [] if ranks == 1 else [titus_bin(), "launch", "-n", "2", "--no-prefix", "--timeout", "240", "--"]
    p = cantera_cells(*launcher)
    assert p.returncode == 0, p.stdout + p.stderr
    import json

    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["bit_for_bit"] is True, report
    assert (report["ranks"], report["cells"], report["steps"]) == (ranks, 8, 2), report
