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
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm

from ..jit import logs

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
    if not _state:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        target = llvm.Target.from_triple(triple)
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        make = lambda: target.create_target_machine(cpu=cpu, features=features, opt=3,  # noqa: E731
                                                   codemodel="jitdefault")
        _state.update(triple=triple, cpu=cpu, features=features, tm=make(), tm_obj=make(),
                      jit=llvm.create_lljit_compiler(make()), count=0)
    return _state


def target_id():
    s = _init()
    return f"{s['triple']}|{s['cpu']}|{s['features']}"


def optimise(module_text):
    """Parse, verify and optimise (O3) a module; returns the llvmlite module."""
    s = _init()
    mod = llvm.parse_assembly(module_text)
    mod.triple = s["triple"]
    mod.data_layout = str(s["tm"].target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(s["tm"], pto)
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
            obj = s["tm_obj"].emit_object(mod)
            if cache is not None:
                cache.put(key, obj)
            logs.log("codegen", "compiled %s (%s)", source.name, " ".join(source.ops))
        else:
            logs.log("codegen", "loaded %s from the disk cache", source.name)
        s["count"] += 1
        lib = llvm.JITLibraryBuilder().add_object_img(obj).export_symbol(source.name).link(
            s["jit"], f"jitorch_kernel_{s['count']}")
        address = lib[source.name]
    entry = (address, lib, optimised, None)
    _memory[key] = entry
    return CompiledKernel(source, *entry)


def emit_object(source):
    """Object code of a kernel source for this host, as `compile_kernel` makes and caches it."""
    return _init()["tm_obj"].emit_object(optimise(source.llvm_ir))


def assembly(source):
    """The target assembly of a kernel source (for `.lower().kernels[i].asm`)."""
    s = _init()
    return s["tm_obj"].emit_assembly(optimise(source.llvm_ir))
