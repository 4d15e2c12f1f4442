"""Run NVPTX kernels on the host: the optimised LLVM IR the PTX is emitted from, with a CUDA grid of threads.

Most machines that build jitorch have no GPU, so ptxas alone would leave the
kernels' logic (grid-stride loops, index maths, warp shuffles, shared memory,
barriers, the tiled matmul) unchecked. This module runs that logic: it takes a
kernel's IR *after* the NVPTX O3 pipeline (the IR the PTX is printed from),
retargets it to the host and runs every CUDA thread of a block as an OS
thread, so divergence, barriers and shuffles behave as they do on a device:

- the special registers (``tid``, ``ntid``, ``ctaid``, ``nctaid``) are read
  from a per-thread context found with ``pthread_getspecific``;
- ``__syncthreads()`` is a ``pthread_barrier_t`` over the block's threads;
- ``shfl.sync.bfly`` is a write to a per-warp buffer between two waits on the
  warp's barrier (all 32 lanes take part, as the full mask says);
- ``__shared__`` memory is the module's global, reused by one block after the
  other (blocks run in turn, threads within a block run at once).

Machine code comes from llvmlite's JIT with no IR optimisation of its own, so
what runs is what NVPTX was given. A block whose threads do not all reach a
barrier hangs on a GPU; here it raises once all its threads have been waiting
(or done) for a timeout, while a launch that is merely slow is waited for.
Linux only (pthread barriers); `available()` says whether this host has them. A launch of 256
threads costs a few milliseconds, so this is for tests on small shapes.
"""

from __future__ import annotations

import ctypes
import functools
import re
import threading
import time

import numpy as np
from llvmlite import ir

from ...codegen.errors import CompileError
from ...codegen.kernel import counted_loop
from ...codegen.linker import Linker
from ...codegen.machine import selected
from ...codegen.memo import BoundedMemo

SREGS = [f"{r}.{a}" for r in ("tid", "ntid", "ctaid", "nctaid") for a in "xyz"]
# The per-thread context: the 12 special registers, then the block's shuffle buffer, warp barriers, block
# barrier (``__syncthreads``), end-of-block barrier, the kernel's arguments, how many threads it runs
# one after the other (0: just itself), and the launch's progress counters (see `_stuck`).
SHUFFLE_BUFFER, WARP_BARRIERS, BLOCK_BARRIER, END_BARRIER, ARGUMENTS, SERIAL, PROGRESS, CONTEXT_WORDS = range(12, 20)
WAITING, PASSED = 0, 1  # the progress counters: threads waiting on a barrier or done, waits that returned
BARRIER_BYTES = 128  # room for a pthread_barrier_t (32 bytes on glibc x86-64 and aarch64)
WARP = 32
TIMEOUT_S = 60.0
KERNEL = "jitorch_emu_kernel"  # every kernel's name in its host module, so the runtime is built once per arity

_RENAMES = [
    (re.compile(r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid|ntid|ctaid|nctaid)\.([xyz])\b"), r"@jitorch_emu_sreg_\1_\2"),
    (re.compile(r"@llvm\.nvvm\.barrier0\b"), "@jitorch_emu_barrier0"),
    (re.compile(r"@llvm\.nvvm\.barrier\.cta\.sync\.aligned\.all\b"), "@jitorch_emu_barrier_all"),
    (re.compile(r"@llvm\.nvvm\.shfl\.sync\.bfly\.i32\b"), "@jitorch_emu_shfl_bfly"),
    (re.compile(r"\bptx_kernel "), ""),
    # Shared memory with external linkage: the host optimiser may not assume that the barrier (an external
    # call here) leaves a module-private global untouched.
    (re.compile(r"= internal (unnamed_addr )?addrspace\(3\)"), r"= \1addrspace(3)"),
    (re.compile(r"^target (datalayout|triple) = .*$", re.M), ""),
]
_NVVM = re.compile(r"@llvm\.nvvm\.[\w.]+")
I32, I64 = ir.IntType(32), ir.IntType(64)
PTR = ir.IntType(8).as_pointer()

_lock = threading.Lock()
_state: dict = {}
# NVPTX IR -> its EmulatedKernel, whose host code stays linked while it is held: a process that keeps making
# kernels (the fuzzer on the fake device makes about ten a program) keeps the most recently used ones only.
# A launch holds its kernel, and a hung launch's thread too, so dropping one here never frees running code.
EMULATED_LIMIT = 256
_programs = BoundedMemo(EMULATED_LIMIT, size=lambda program: 1)
_hung: list = []


def _libc():
    if "libc" not in _state:
        _state["libc"] = ctypes.CDLL(None)
    return _state["libc"]


def available():
    """Whether this host can emulate kernels (it needs POSIX thread barriers)."""
    return hasattr(_libc(), "pthread_barrier_init")


def _runtime():
    """The JIT, the thread-context key, and the addresses of the pthread functions the kernels call."""
    if "linker" not in _state:
        # The selected CPU, as the CPU target uses: without F16C, half conversions are calls into jitorch's
        # builtins, which the linker provides.
        machine = selected()
        libc = _libc()
        key = ctypes.c_uint()
        if libc.pthread_key_create(ctypes.byref(key), None):
            raise RuntimeError("kernel emulator: pthread_key_create failed")
        symbols = {name: ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
                   for name in ("pthread_getspecific", "pthread_setspecific", "pthread_barrier_wait",
                                "pthread_create", "pthread_join")}
        _state.update(linker=Linker(machine, opt=0, codemodel="jitdefault"), machine=machine,
                      tm=machine.target_machine(opt=0, codemodel="jitdefault"), key=key.value, symbols=symbols)
    return _state


def host_ir(nvptx_ir):
    """A kernel's NVPTX IR with its GPU intrinsics turned into calls to the emulator's runtime."""
    text = nvptx_ir
    for pattern, replacement in _RENAMES:
        text = pattern.sub(replacement, text)
    unknown = sorted(set(_NVVM.findall(text)))
    if unknown:
        raise CompileError(f"kernel emulator: no host version of {', '.join(unknown)}")
    return text


@functools.lru_cache(maxsize=None)
def _runtime_module(n_args, key):
    """The special registers, barriers and shuffle over the thread context; the thread body that runs one
    thread's share of the grid (every block in turn, then a wait on the block's barrier) or, for a kernel
    with no barrier or shuffle, every thread of the grid one after the other; and the launch, which starts a
    POSIX thread per context and joins them (no Python, so no GIL, in between)."""
    m = ir.Module(name="jitorch_emulator_runtime")
    getspecific = ir.Function(m, ir.FunctionType(PTR, [I32]), "pthread_getspecific")
    setspecific = ir.Function(m, ir.FunctionType(I32, [I32, PTR]), "pthread_setspecific")
    wait = ir.Function(m, ir.FunctionType(I32, [PTR]), "pthread_barrier_wait")
    word_ptr = I64.as_pointer()

    def context(b):
        return b.bitcast(b.call(getspecific, [I32(key)]), word_ptr)

    def word(b, ctx, i):
        return b.load(b.gep(ctx, [I64(i)]))

    def pointer(b, ctx, i):
        return b.inttoptr(word(b, ctx, i), PTR)

    def count(b, ctx, counter, delta):
        progress = b.inttoptr(word(b, ctx, PROGRESS), word_ptr)
        b.atomic_rmw("add", b.gep(progress, [I64(counter)]), I64(delta), "seq_cst")

    def counted_wait(b, ctx, barrier):
        """``pthread_barrier_wait``, counted: the host tells a block stuck on a barrier from a slow one."""
        count(b, ctx, WAITING, 1)
        b.call(wait, [barrier])
        count(b, ctx, WAITING, -1)
        count(b, ctx, PASSED, 1)

    for i, reg in enumerate(SREGS):
        fn = ir.Function(m, ir.FunctionType(I32, []), "jitorch_emu_sreg_" + reg.replace(".", "_"))
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(b.trunc(word(b, context(b), i), I32))

    for name, params in (("jitorch_emu_barrier0", []), ("jitorch_emu_barrier_all", [I32])):
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), params), name)
        b = ir.IRBuilder(fn.append_basic_block())
        ctx = context(b)
        counted_wait(b, ctx, pointer(b, ctx, BLOCK_BARRIER))
        b.ret_void()

    fn = ir.Function(m, ir.FunctionType(I32, [I32] * 4), "jitorch_emu_shfl_bfly")
    _mask, value, lane_mask, _clamp = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    ctx = context(b)
    tid = word(b, ctx, 0)
    buffer = b.bitcast(pointer(b, ctx, SHUFFLE_BUFFER), I32.as_pointer())
    b.store(value, b.gep(buffer, [tid]))
    warp_barrier = b.gep(pointer(b, ctx, WARP_BARRIERS), [b.mul(b.lshr(tid, I64(5)), I64(BARRIER_BYTES))])
    counted_wait(b, ctx, warp_barrier)
    source = b.xor(tid, b.zext(lane_mask, I64))  # the lane mask is below 32: the same warp
    result = b.load(b.gep(buffer, [source]))
    counted_wait(b, ctx, warp_barrier)  # nobody overwrites the buffer before every lane has read it
    b.ret(result)

    kernel = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR] * n_args), KERNEL)
    thread = ir.Function(m, ir.FunctionType(PTR, [PTR]), "jitorch_emu_thread")
    (raw_ctx,) = thread.args
    b = ir.IRBuilder(thread.append_basic_block())
    b.call(setspecific, [I32(key), raw_ctx])
    ctx = b.bitcast(raw_ctx, word_ptr)
    args_array = b.bitcast(pointer(b, ctx, ARGUMENTS), PTR.as_pointer())
    args = [b.load(b.gep(args_array, [I64(i)])) for i in range(n_args)]
    end_barrier = pointer(b, ctx, END_BARRIER)
    ctaid = {a: b.gep(ctx, [I64(SREGS.index(f"ctaid.{a}"))]) for a in "xyz"}
    def over(axis, inner):
        def body(b, i):
            b.store(i, ctaid[axis])
            inner(b)
        return lambda b: counted_loop(b, I64(0), word(b, ctx, SREGS.index(f"nctaid.{axis}")), I64(1), body, axis)

    def one_block(b):
        serial = word(b, ctx, SERIAL)
        with b.if_else(b.icmp_signed("==", serial, I64(0))) as (concurrent, one_by_one):
            with concurrent:
                b.call(kernel, args)
                # The next block may reuse shared memory once this one is done. A barrier of its own: a thread
                # that skips a __syncthreads must not be taken for one that reached it.
                counted_wait(b, ctx, end_barrier)
            with one_by_one:
                def one_thread(b, t):
                    b.store(t, b.gep(ctx, [I64(0)]))
                    b.call(kernel, args)
                counted_loop(b, I64(0), serial, I64(1), one_thread, "serial")

    over("z", over("y", over("x", one_block)))(b)
    count(b, ctx, WAITING, 1)  # done: as still as a thread that waits forever
    b.ret(ir.Constant(PTR, None))

    create = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), "pthread_create")
    join = ir.Function(m, ir.FunctionType(I32, [I64, PTR]), "pthread_join")
    fn = ir.Function(m, ir.FunctionType(I64, [word_ptr, I64, word_ptr]), "jitorch_emu_launch")
    contexts, count, handles = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    start = b.bitcast(thread, PTR)
    failed = b.alloca(I64)
    b.store(I64(0), failed)

    def start_thread(b, t):
        status = b.call(create, [b.bitcast(b.gep(handles, [t]), PTR), ir.Constant(PTR, None), start,
                                 b.bitcast(b.gep(contexts, [b.mul(t, I64(CONTEXT_WORDS))]), PTR)])
        b.store(b.add(b.load(failed), b.zext(b.icmp_signed("!=", status, I32(0)), I64)), failed)
    counted_loop(b, I64(0), count, I64(1), start_thread, "start")
    with b.if_then(b.icmp_signed("!=", b.load(failed), I64(0))):
        b.ret(b.load(failed))  # the threads that did start wait for the others forever: report, do not join
    counted_loop(b, I64(0), count, I64(1), lambda b, t: b.call(join, [b.load(b.gep(handles, [t])),
                                                                      ir.Constant(PTR, None)]), "join")
    b.ret(I64(0))
    return str(m)


class EmulatedKernel:
    """A kernel's NVPTX IR compiled for the host, ready to run on a grid (see the module docstring)."""

    def __init__(self, name, nvptx_ir):
        import llvmlite.binding as llvm
        state = _runtime()
        text = host_ir(nvptx_ir)
        module = llvm.parse_assembly(text)
        kernel = module.get_function(name)
        n_args = len(list(kernel.arguments))
        kernel.name = KERNEL
        module.link_in(llvm.parse_assembly(_runtime_module(n_args, state["key"])))
        module.triple = state["machine"].triple
        module.data_layout = str(state["tm"].target_data)
        with _lock:
            obj = state["tm"].emit_object(module)
        self._library = state["linker"].link(obj, ["jitorch_emu_launch"], state["symbols"], fresh=True)
        self.name = name
        self.n_args = n_args
        # Threads that never wait for each other give the same results run one after the other.
        self.serial = "@jitorch_emu_barrier" not in text and "@jitorch_emu_shfl" not in text
        self._launch = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)(
            self._library["jitorch_emu_launch"])
        self._launch_lock = threading.Lock()  # one launch at a time: the shared memory is one global

    def __call__(self, pointers, grid, block, timeout=TIMEOUT_S):
        """Run on device ``pointers`` (host addresses here) with ``grid`` blocks (x, y, z) of ``block`` threads."""
        if len(pointers) != self.n_args:
            raise ValueError(f"kernel {self.name} takes {self.n_args} pointers, got {len(pointers)}")
        if block % WARP:
            raise ValueError(f"kernel emulator: {block} threads per block is not a whole number of warps")
        grid = tuple(grid) + (1,) * (3 - len(grid))
        libc = _libc()
        with self._launch_lock:
            threads = 1 if self.serial else block
            contexts = np.zeros((threads, CONTEXT_WORDS), np.int64)
            shuffles = np.zeros(block, np.int32)
            barriers = np.zeros((block // WARP + 2) * BARRIER_BYTES, np.uint8)
            base = barriers.ctypes.data
            warps = [base + w * BARRIER_BYTES for w in range(block // WARP)]
            block_barrier, end_barrier = (base + (block // WARP + i) * BARRIER_BYTES for i in (0, 1))
            for b, count in [(w, WARP) for w in warps] + [(block_barrier, block), (end_barrier, block)]:
                libc.pthread_barrier_init(ctypes.c_void_p(b), None, ctypes.c_uint(count))
            contexts[:, 0] = np.arange(threads)
            contexts[:, SERIAL] = block if self.serial else 0
            contexts[:, 3:6] = (block, 1, 1)
            contexts[:, 9:12] = grid
            contexts[:, SHUFFLE_BUFFER] = shuffles.ctypes.data
            contexts[:, WARP_BARRIERS] = base
            contexts[:, BLOCK_BARRIER] = block_barrier
            contexts[:, END_BARRIER] = end_barrier
            args = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
            contexts[:, ARGUMENTS] = ctypes.addressof(args)
            progress = np.zeros(2, np.int64)
            contexts[:, PROGRESS] = progress.ctypes.data
            handles = np.zeros(threads, np.uint64)
            failed = []
            waiter = threading.Thread(target=lambda: failed.append(
                self._launch(contexts.ctypes.data, threads, handles.ctypes.data)), daemon=True)
            waiter.start()
            waiter.join(timeout)
            while waiter.is_alive() and not _stuck(progress, threads):
                waiter.join(timeout)  # slow, not stuck: its threads run on, writing into the caller's memory
            if waiter.is_alive() or failed[0]:
                _hung.append((contexts, shuffles, barriers, args, handles, progress))  # stuck threads still use them
                if failed:
                    raise RuntimeError(f"kernel emulator: could not start {failed[0]} of {threads} threads")
                raise RuntimeError(f"kernel {self.name} did not finish within {timeout:g} s: some threads wait on "
                                   "a barrier or shuffle that others of their block never reach")
            for b in warps + [block_barrier, end_barrier]:
                libc.pthread_barrier_destroy(ctypes.c_void_p(b))

    def __repr__(self):
        return f"<emulated kernel {self.name}>"


def _stuck(progress, threads, pause=0.1):
    """Whether a launch's ``threads`` all wait on a barrier or are done, and stay so with no wait returning
    over ``pause`` seconds: a block some of whose threads skipped a barrier, which never ends. A launch that is
    merely slow must not be given up on: its threads would go on writing into memory its caller frees after
    the error. (Right after the last thread of a block arrives, all wait for a moment: hence the pause.)"""
    passed = int(progress[PASSED])
    if progress[WAITING] != threads:
        return False
    time.sleep(pause)
    return progress[WAITING] == threads and progress[PASSED] == passed


def emulated(kernel):
    """The `EmulatedKernel` of a CUDA kernel (a `PtxKernel` or a tiled matmul), built once per IR."""
    text = kernel.llvm_ir
    program = _programs.get(text)
    if program is None:
        program = EmulatedKernel(kernel.name, text)
        _programs.put(text, program)
    return program


def launch(kernel, pointers, multiprocessors=132):
    """Run ``kernel`` on ``pointers`` with the grid a device of ``multiprocessors`` would get."""
    grid, block = kernel.grid(multiprocessors)
    emulated(kernel)(pointers, grid if isinstance(grid, tuple) else (grid,), block)
