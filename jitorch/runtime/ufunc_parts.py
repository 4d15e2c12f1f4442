"""Large eager NumPy ufunc passes split across the thread team (`runtime.threads`), without the GIL.

An eager op computes with NumPy on the calling thread. NumPy lets the GIL go inside a ufunc's loop, but a
worker handed a Python part must take the GIL to start it, and on this project's 2-core virtual machine a thread
woken from the GIL's condition variable took 10 to 60 µs: splitting ``x + y`` of 2**17 float32 elements that
way took 1.6x the time of the whole call. Here a worker never touches Python: NumPy gives out the very strided
loop its call would run (``ufunc._resolve_dtypes_and_context`` and ``ufunc._get_strided_loop``, NumPy's
interface for compilers, 1.24 and later), and the team's native code (``jitorch_ufunc_program``) calls it on
each thread's range of elements, as `threads.run_chunks` runs a compiled kernel's chunks.

Results are bit for bit the single-thread call's: every pass is elementwise and runs NumPy's own loop for the
same dtypes, on ranges whose bounds are multiples of 64 elements (a loop's SIMD vectors then group the
elements as in the whole call). A sequence of passes (`split_passes`) runs chunk by chunk in each part, as the
callers' cache-sized chunked loops run them on one thread.
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import threads
from .array_address import data_address

# Elements from which a pass splits. Handing a part over and joining costs ~6 µs on this machine. Best of
# 1,500 calls at two threads on the loaded 2-core machine, whole -> split: float32 ``x + y`` of 2**16 elements
# 16 -> 19 µs, tanh 22 -> 30; of 2**17, 36 -> 31 and 48 -> 43; of 2**18, 115 -> 59 and 100 -> 71.
SPLIT_MIN = 1 << 17
# Part bounds are multiples of this many elements (a whole cache line of float64 times 8: no part's SIMD
# vectors straddle another's, and parts write no common cache line)
_ALIGN = 64
_CAPSULE = b"numpy_1.24_ufunc_call_info"
# Calls that run here without asking the team, after one whose parts no worker claimed before this thread had
# run its own (`threads.counters["taken back"]`): the workers are asleep or off the cores, as on a machine with
# more runnable threads than cores. Waking them for each call there cost more than the calls (a GPT training
# step on two busy cores: 0.98 of its parts taken back, each wake-up a thread the scheduler must place).
BACKOFF = 64
_backoff = {"calls": 0}


class _CallInfo(ctypes.Structure):
    """NumPy's ``ufunc_call_info`` (numpy/_core/src/umath/ufunc_object.c)."""
    _fields_ = [("loop", ctypes.c_void_p), ("context", ctypes.c_void_p), ("auxdata", ctypes.c_void_p),
                ("requires_pyapi", ctypes.c_ubyte), ("no_floatingpoint_errors", ctypes.c_ubyte)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_loops: dict = {}  # (ufunc, dtypes, strides) -> (capsule, loop, context, auxdata), or None: no native loop


def _loop(ufunc, dtypes, strides):
    """``(capsule, loop, context, auxdata)`` of the strided loop NumPy runs for ``ufunc`` on operands of
    ``dtypes`` (inputs, then the output) and fixed ``strides``, the capsule owning the context and auxdata;
    None where NumPy would cast an operand, the loop needs the GIL or NumPy has no such interface."""
    key = (ufunc, dtypes, strides)
    found = _loops.get(key, False)
    if found is False:
        found = None
        try:
            resolved, capsule = ufunc._resolve_dtypes_and_context(dtypes)
            # numeric loops only: their auxdata, if any, is read-only, so two threads may run one loop at once
            if resolved == dtypes and all(d.kind in "biuf" for d in dtypes):
                ufunc._get_strided_loop(capsule, fixed_strides=strides)
                info = _CallInfo.from_address(_capsule_pointer(capsule, _CAPSULE))
                if info.loop and not info.requires_pyapi:
                    found = (capsule, info.loop, info.context or 0, info.auxdata or 0)
        except (AttributeError, TypeError, ValueError):  # NumPy before 1.24, or no loop for these dtypes
            found = None
        _loops[key] = found
    return found


def parts_of(n):
    """How many parts a pass over ``n`` elements splits into: 1 below `SPLIT_MIN` or at one thread."""
    if n < SPLIT_MIN:
        return 1
    return max(1, min(threads.get_num_threads(), n // (SPLIT_MIN // 2)))


class Program:
    """Passes of NumPy ufuncs over the elements of contiguous arrays, run on the thread team (`run`).

    ``passes``: ``(ufunc, operands)``, the output last, as ``ufunc(*operands[:-1], out=operands[-1])``. An
    operand is ``("arg", i)``: the ``i``-th array given to `run` (C-contiguous, of dtype ``args[i]``); a
    0-d array or NumPy scalar: every element; or an int ``k``: the ``k``-th scratch buffer, of dtype
    ``scratch[k]``, one per part, of ``chunk`` elements. Each part runs every pass on its first ``chunk``
    elements (all of them if ``chunk`` is None), then on the next ``chunk``. A program whose passes NumPy gives
    no native loop for (`_loop`) never runs: `run` answers False."""

    def __init__(self, passes, args, scratch=(), chunk=None):
        self.args = tuple(np.dtype(d) for d in args)
        self.scratch = tuple(np.dtype(d) for d in scratch)
        self.chunk = chunk
        self.constants = []  # the 0-d operands, alive as long as the program
        self.capsules = []
        table, self.arg_slots, self.scratch_slots = [len(passes), 0], [], []
        for ufunc, operands in passes:
            if len(operands) > 4 or len(operands) != ufunc.nin + ufunc.nout:
                raise ValueError(f"{ufunc.__name__}: {len(operands)} operands")
            dtypes, strides, slots = [], [], []
            for a in operands:
                if a.__class__ is tuple:
                    dtype = self.args[a[1]]
                    strides.append(dtype.itemsize)
                    slots.append((self.arg_slots, a[1], 0))
                elif a.__class__ is int:
                    dtype = self.scratch[a]
                    strides.append(dtype.itemsize)
                    slots.append((self.scratch_slots, a, 1))
                else:
                    a = np.array(a)
                    dtype = a.dtype
                    self.constants.append(a)
                    strides.append(0)
                    slots.append((None, data_address(a), 0))
                dtypes.append(dtype)
            found = _loop(ufunc, tuple(dtypes), tuple(strides))
            if found is None:
                self.table = None
                return
            capsule, loop, context, auxdata = found
            self.capsules.append(capsule)
            table += [loop, context, auxdata, len(operands)]
            for (where, which, relative), stride in zip(slots, strides):
                if where is not None:
                    where.append((len(table), which))
                    which = 0
                table += [which, stride, relative]
        self.table = (ctypes.c_int64 * len(table))(*table)

    def run(self, n, *arrays):
        """Run the passes over the ``n`` elements of ``arrays`` on the team: True, or False, having done
        nothing, where they do not split (`parts_of`), NumPy gave no native loop, or an array is not a
        C-contiguous array of ``n`` elements of its dtype (the caller then makes its NumPy calls itself)."""
        parts = parts_of(n)
        if parts == 1 or self.table is None:
            return False
        if _backoff["calls"]:
            _backoff["calls"] -= 1
            return False
        native = threads._native()
        if native is None:
            return False
        addresses = []
        for a, dtype in zip(arrays, self.args):
            if (a.__class__ is not np.ndarray or a.dtype != dtype or a.size != n or not a.flags.c_contiguous
                    or not a.flags.aligned):
                return False
            addresses.append(data_address(a))
        step = -(-n // parts)
        step = -(-step // _ALIGN) * _ALIGN
        bounds = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
        chunk = min(step, n if self.chunk is None else self.chunk)
        template = self.table
        kind = type(template)
        base = kind.from_buffer_copy(template)
        base[1] = chunk
        for slot, i in self.arg_slots:
            base[slot] = addresses[i]
        keep = []  # the parts' scratch buffers, alive until every part has run
        tables = []
        for _ in bounds:
            table = base
            if self.scratch:
                buffers = [np.empty(chunk, dtype) for dtype in self.scratch]
                keep.append(buffers)
                table = kind.from_buffer_copy(base)
                for slot, k in self.scratch_slots:
                    table[slot] = data_address(buffers[k])
            tables.append(table)
        entry = native.ufunc_program
        work = [(ctypes.addressof(t), lo, hi) for t, (lo, hi) in zip(tables, bounds)]
        taken_back = threads.counters["taken back"]
        if not threads._forked(work, entry):
            run = threads.KERNEL_ENTRY(entry)
            for address, lo, hi in work:
                run(address, lo, hi)
        elif threads.counters["taken back"] - taken_back == len(work) - 1:  # (no worker came)
            _backoff["calls"] = BACKOFF
        return True


_calls: dict = {}  # (ufunc, dtypes, whether each operand is a number) -> its one-pass Program


def split_call(ufunc, operands, out):
    """``ufunc(*operands, out=out)`` on the team, as one pass (`Program`), else False having done nothing.
    ``operands``: C-contiguous arrays of ``out``'s size, or NumPy scalars / 0-d arrays (each element)."""
    n = out.size
    if n < SPLIT_MIN:
        return False
    arrays, key = [], [ufunc, out.dtype]
    for a in operands:
        if a.__class__ is np.ndarray and a.ndim:
            arrays.append(a)
            key.append(a.dtype)
        else:
            key.append(a)  # (a NumPy scalar: hashed by value and type)
    key = tuple(key)
    program = _calls.get(key)
    if program is None:
        count = 0
        spec = []
        for a in operands:
            if a.__class__ is np.ndarray and a.ndim:
                spec.append(("arg", count))
                count += 1
            else:
                spec.append(a)
        spec.append(("arg", count))
        if len(_calls) > 256:  # (keyed by scalar values too: keep the cache bounded)
            _calls.clear()
        program = _calls[key] = Program([(ufunc, spec)], [a.dtype for a in arrays] + [out.dtype])
    return program.run(n, *arrays, out)


def run_passes(n, passes):
    """Run ``passes`` ``(ufunc, (*inputs, output))`` over the ``n`` elements of their operands (arrays of ``n``
    elements, or NumPy scalars: every element) one after another: on the thread team where they split
    (`Program`: C-contiguous arrays, each part's elements through every pass in turn, so distinct arrays must
    not share memory), else as NumPy calls here, each pass over all elements before the next."""
    if parts_of(n) > 1:
        arrays, index, spec = [], {}, []
        for ufunc, operands in passes:
            placed = []
            for a in operands:
                if a.__class__ is np.ndarray and a.ndim:
                    i = index.get(id(a))
                    if i is None:
                        i = index[id(a)] = len(arrays)
                        arrays.append(a)
                    placed.append(("arg", i))
                else:
                    placed.append(a)
            spec.append((ufunc, tuple(placed)))
        if Program(spec, [a.dtype for a in arrays]).run(n, *arrays):
            return
    for ufunc, operands in passes:
        ufunc(*operands[:-1], out=operands[-1])
