"""Titus from Python: distributed dynamic load balancing of a map over ranks.

Every rank (a process: ``titus launch -n N -- python3 script.py``, ``mpirun`` or
``srun``; a single rank without a launcher) calls ``map`` with its own items; idle ranks
steal batches of tasks from busy ones, and each rank gets back the results of its own
items, in their order::

    import titus

    with titus.Runtime() as rt:                  # keyword options: libtitus's option keys
        out = rt.map(simulate_cell, my_cells, keys=my_cell_ids)
        print(rt.rank, rt.size, rt.stats["efficiency"])

``fn`` must be a module-level function: it is pickled by reference and imported on the
rank that runs the task. Items and results are pickled (protocol 5) with their buffers
out of band: a numpy array's memory is copied once into the task, and the task's array is
a writable view of what arrived.
"""

import contextlib
import pickle
import signal
import struct
import threading
import traceback

from . import _titus
from ._titus import Error, TaskError

__all__ = ["Runtime", "Error", "TaskError"]

# One worker a rank (the GIL: one rank per core), and room for a pickled item and result of a
# few kilobytes by default (each rank registers 3 x 1,024 slots of max_payload bytes).
_DEFAULT_OPTIONS = {"workers": 1, "max_payload": 4096, "max_result": 4096}

# The separator of a failed task's type, message and traceback in its error text: a
# printable one (␞), since the text that reaches the other ranks loses control characters
# (and is cut to 240 bytes there: the traceback comes last).
_SEP = "\u241e"

# A payload whose function length is this carries, instead of a task, why this rank's
# item could not be sent: it fails the map on every rank, like a task that raised.
_POISON = 0xFFFFFFFF


# Out-of-band buffers start at offsets that are multiples of this within a frame, so an
# array that views one is aligned as numpy's own allocations are.
_ALIGN = 16

# Whether items and results give their buffers out of band (map_bench.py's arrays mode
# turns it off to compare with pickling them in band).
_OUT_OF_BAND = True

# Smaller buffers stay in band: below about 8 KiB, framing costs more than the copies it
# saves (map_bench.py arrays).
_OUT_OF_BAND_MIN = 8192


def _frame(prefix, obj):
    """``obj`` pickled (protocol 5) after ``prefix``: ``prefix``, the count of out-of-band
    buffers (u32), and, where there are any, the pickle's length and each buffer's (u64),
    the pickle, then each buffer at an aligned offset; otherwise the pickle. Bytes where
    there are no buffers, else ``(total bytes, parts)`` for the runtime to copy end to
    end: the buffers are the objects' own memory, not copies."""
    buffers = []

    def in_band(buffer):
        if memoryview(buffer).nbytes < _OUT_OF_BAND_MIN:
            return True
        buffers.append(buffer)
        return False

    body = pickle.dumps(obj, protocol=5, buffer_callback=in_band if _OUT_OF_BAND else None)
    if not buffers:
        return prefix + b"\0\0\0\0" + body
    raws = []
    for b in buffers:
        try:
            raws.append(b.raw())
        except BufferError:  # (memory that is not contiguous: copied into one run)
            raws.append(memoryview(bytes(b)))
    head = prefix + struct.pack(f"<IQ{len(raws)}Q", len(raws), len(body), *(r.nbytes for r in raws))
    parts, at = [head, body], len(head) + len(body)
    for r in raws:
        pad = -at % _ALIGN
        if pad:
            parts.append(bytes(pad))
        parts.append(r)
        at += pad + r.nbytes
    return (at, parts)


def _unframe(view, at):
    """The object framed at offset ``at`` of ``view`` (a memoryview of a bytearray): its
    out-of-band buffers are views of ``view``, so arrays come back without a copy."""
    count = int.from_bytes(view[at : at + 4], "little")
    if count == 0:
        return pickle.loads(view[at + 4 :])
    (size,) = struct.unpack_from("<Q", view, at + 4)
    at += 12
    lengths = struct.unpack_from(f"<{count}Q", view, at)
    at += 8 * count
    body = view[at : at + size]
    at += size
    buffers = []
    for n in lengths:
        at += -at % _ALIGN
        if at + n > len(view):
            raise ValueError(f"a frame's buffer of {n} bytes at {at} runs past its {len(view)} bytes")
        buffers.append(view[at : at + n])
        at += n
    return pickle.loads(body, buffers=buffers)


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _terminable():
    """While a map runs, SIGTERM (a scheduler's cancel, ``kill``) raises SystemExit on this
    rank's main thread where it would otherwise end the process at once: the map then
    stops on every rank (as for Ctrl-C), and every rank leaves through its own cleanup
    instead of the others waiting to find a dead peer. A handler of the program's own is
    left alone, and the default comes back after the map."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _option_text(options):
    parts = []
    for key, value in {**_DEFAULT_OPTIONS, **options}.items():
        if isinstance(value, bool):
            value = "on" if value else "off"
        text = str(value)
        if not text or any(c.isspace() or c == "," for c in text):
            raise Error(f"option {key}={text!r}: a value without spaces or commas")
        parts.append(f"{key}={text}")
    return " ".join(parts)


def _describe(exc):
    """An exception as its type, message and traceback, joined by _SEP."""
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    return f"{name}{_SEP}{exc}{_SEP}{text}"


_functions = {}


def _run_task(payload):
    """Runs one task (on a worker thread of the rank that took it): (True, the pickled
    result) or (False, why, as _describe gives it)."""
    view = memoryview(payload)
    size = int.from_bytes(view[:4], "little")
    if size == _POISON:
        return (False, bytes(view[4:]))
    index = int.from_bytes(view[4 + size : 12 + size], "little")
    try:
        key = bytes(view[4 : 4 + size])
        fn = _functions.get(key)
        if fn is None:
            fn = _functions[key] = pickle.loads(key)
        item = _unframe(view, 12 + size)
    except Exception as exc:  # the function or the item did not unpickle here
        return (False, _describe(exc).encode())
    try:
        result = fn(item)
    except Exception as exc:
        return (False, _describe(exc).encode())
    try:
        return (True, _frame(b"", result))
    except Exception as exc:
        why = Error(f"the result of item {index} cannot be pickled: {exc}")
        return (False, _describe(why).encode())


def _task_error(err):
    """A TaskError carrying the failed task's exception type, message and traceback (every
    rank gets the words of the rank where it failed)."""
    text = str(err)
    if _SEP not in text:
        e = TaskError(text)
        e.exc_type, e.message, e.traceback_text = None, text, ""
        return e
    head, message, trace = text.split(_SEP, 2)
    # The runtime's words come first ("task 3 of rank 0 failed on rank 1: "), then
    # the exception's type.
    where, _, kind = head.rpartition(": ")
    e = TaskError(f"{where}: {kind}: {message}\n{trace}".lstrip(": "))
    e.exc_type, e.message, e.traceback_text = kind, message, trace
    return e


class Runtime:
    """One rank of a Titus job. Keyword options are libtitus's option keys (``workers``,
    ``balancer``, ``provider``, ``max_payload``, ...; ``TITUS_OPTIONS`` overrides them).
    Opening and closing are collective: every rank of the job does both. With ``comm``
    (an mpi4py communicator) the ranks are the communicator's and exchange their
    addresses through it: no launcher variables are read."""

    def __init__(self, comm=None, **options):
        exchange = None
        if comm is not None:
            exchange = (comm.Get_rank(), comm.Get_size(), comm.allgather)
        self._rt = _titus.Runtime(_option_text(options), exchange)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Leaves the job (collective). Idempotent."""
        self._rt.close()

    @property
    def rank(self):
        return self._rt.rank

    @property
    def size(self):
        return self._rt.size

    @property
    def stats(self):
        """The last map's figures on this rank (a dict): ``efficiency``,
        ``nominal_efficiency`` (with ``nominal_s`` given to map), ``resolution_s``,
        ``steals``, ``tasks_stolen``, ``tasks_ran_elsewhere``, ..."""
        return self._rt.stats

    def allgather(self, obj):
        """Every rank's ``obj`` (pickled), in rank order. Collective."""
        blobs = self._rt.all_gather(pickle.dumps(obj, protocol=5))
        return [pickle.loads(b) for b in blobs]

    def map(self, fn, items, keys=None, costs=None, priorities=None, nominal_s=None):
        """``[fn(x) for x in items]`` for this rank's items, in their order, balanced
        over the job. Collective: every rank calls it, each with its own items (possibly
        none). ``keys`` (ints) name items across calls, so each call's measured costs
        predict the next's; ``costs`` are hints in seconds, which outweigh that
        prediction; ``priorities`` (-32768 to
        32767) run higher first; ``nominal_s``, this rank's sequential time of its items,
        gives ``stats["nominal_efficiency"]``. A task that raises fails the map on every
        rank with TaskError."""
        items = list(items)
        payloads = []
        try:
            head = pickle.dumps(fn, protocol=5)
        except Exception as exc:
            head, why = None, f"the function {fn!r} cannot be pickled by reference: {exc}"
        for i, item in enumerate(items):
            if head is not None:
                try:
                    prefix = len(head).to_bytes(4, "little") + head + i.to_bytes(8, "little")
                    payloads.append(_frame(prefix, item))
                except Exception as exc:
                    head, why = None, f"item {i} of rank {self.rank} cannot be pickled: {exc}"
            if head is None:
                break
        if head is None:
            # Every rank must fail, not wait for this one: one task that fails carries it.
            poison = _POISON.to_bytes(4, "little") + _describe(Error(why)).encode()
            payloads, keys, costs, priorities = [poison], None, None, None
        try:
            with _terminable():
                out = self._rt.run(payloads, keys, costs, priorities, float(nominal_s or 0.0))
        except TaskError as err:
            raise _task_error(err) from None
        except OverflowError as err:
            raise Error(f"keys, costs or priorities out of range: {err}") from None
        results = []
        for i, r in enumerate(out):
            try:
                results.append(_unframe(memoryview(r), 0))
            except Exception as exc:
                raise Error(f"the result of item {i} cannot be unpickled here: {exc}") from None
        return results
