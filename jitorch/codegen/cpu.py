"""The CPU target: optimise a kernel module, make machine code, call it in chunks on threads.

One long-lived LLJIT per process links every kernel (llvmlite's ORC JIT lets
a target machine be reused and libraries be added at will; see
shared/LLVM-NOTES.md). Object code is cached on disk keyed by the kernel's
LLVM IR and the target, so a second process loads machine code without
running LLVM's optimiser. Calls go through ctypes, which releases the GIL, so
chunks of a kernel's outer loop run in parallel on a thread pool.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm

from ..jit import logs
from .linker import Linker
from .machine import selected

_lock = threading.Lock()
_state = {}

ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

# Below this many elements a kernel runs on the calling thread: handing chunks to
# a pool costs tens of microseconds.
PARALLEL_MIN_WORK = 1 << 18


def num_threads():
    """``JITORCH_NUM_THREADS``, default the number of cores."""
    value = os.environ.get("JITORCH_NUM_THREADS")
    return max(1, int(value)) if value else (os.cpu_count() or 1)


def _init():
    """This process's JIT, for the machine ``JITORCH_CPU`` selects (checked to run here)."""
    if not _state:
        machine = selected()
        _state.update(machine=machine, linker=Linker(machine, opt=3, codemodel="jitdefault"))
    return _state


@functools.cache
def _target_machines(machine):
    """(optimising TargetMachine, object-emitting TargetMachine) for ``machine``: LLVM-NOTES says to keep
    the one that emits objects apart."""
    make = lambda: machine.target_machine(opt=3, codemodel="jitdefault")  # noqa: E731
    return make(), make()


def target_id():
    """The selected machine's triple, CPU and features, as kernel-cache keys mix them in."""
    return _init()["machine"].id()


def optimise(module_text, machine=None):
    """Parse, verify and optimise (O3) a module for ``machine`` (default: the selected one)."""
    machine = machine or _init()["machine"]
    tm = _target_machines(machine)[0]
    mod = llvm.parse_assembly(module_text)
    mod.triple = machine.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


class CompiledKernel:
    """A kernel in machine code: call it on buffers, over chunks of its outer loop."""

    def __init__(self, source, address, library, optimised_ir, asm):
        self.source = source
        self.name = source.name
        self.ops = source.ops
        self.llvm_ir = optimised_ir
        self.asm = asm
        self._library = library  # keeps the code alive
        self.fn = ENTRY(address)
        self.outer = source.outer
        self.parallel = source.work >= PARALLEL_MIN_WORK and source.outer > 1

    def __call__(self, args_array):
        """Run on a ctypes array of buffer addresses."""
        if not self.parallel or num_threads() == 1:
            self.fn(args_array, 0, self.outer)
            return
        n = num_threads()
        step = -(-self.outer // n)
        bounds = [(i, min(i + step, self.outer)) for i in range(0, self.outer, step)]
        futures = [_pool().submit(self.fn, args_array, lo, hi) for lo, hi in bounds[1:]]
        self.fn(args_array, *bounds[0])
        for f in futures:
            f.result()

    def __repr__(self):
        return f"<kernel {self.name}: {' '.join(self.ops)}>"


_pool_state = {}


def _pool():
    n = num_threads()
    pool = _pool_state.get(n)
    if pool is None:
        pool = _pool_state[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="jitorch")
    return pool


_memory: dict = {}


def compile_kernel(source, cache=None):
    """Machine code for a kernel source, from memory, the disk cache, or LLVM."""
    from .cache import cache_key
    s = _init()
    key = cache_key(source.llvm_ir, target_id())  # the key adds jitorch's and llvmlite's versions
    hit = _memory.get(key)
    if hit is not None:
        return CompiledKernel(source, *hit)
    with _lock:
        obj = cache.get(key) if cache is not None else None
        optimised = None
        if obj is None:
            mod = optimise(source.llvm_ir)
            optimised = str(mod)
            obj = _target_machines(s["machine"])[1].emit_object(mod)
            s["linker"].resolve(obj)  # a kernel that cannot link is never cached
            if cache is not None:
                cache.put(key, obj)
            logs.log("codegen", "compiled %s (%s)", source.name, " ".join(source.ops))
        else:
            logs.log("codegen", "loaded %s from the disk cache", source.name)
        lib = s["linker"].link(obj, [source.name])
        address = lib[source.name]
    entry = (address, lib, optimised, None)
    _memory[key] = entry
    return CompiledKernel(source, *entry)


def emit_object(source, machine=None):
    """Object code of a kernel source for ``machine`` (default: the selected one), as `compile_kernel` makes
    and caches it; any machine LLVM has a target for, whether or not it could run here."""
    machine = machine or _init()["machine"]
    return _target_machines(machine)[1].emit_object(optimise(source.llvm_ir, machine))


def assembly(source):
    """The target assembly of a kernel source (for `.lower().kernels[i].asm`)."""
    machine = _init()["machine"]
    return _target_machines(machine)[1].emit_assembly(optimise(source.llvm_ir, machine))
