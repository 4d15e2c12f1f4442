"""Run NVPTX kernels on the host: the optimised LLVM IR the PTX is emitted from, with a CUDA grid of threads.

Most machines that build jitorch have no GPU, so ptxas alone would leave the
kernels' logic (grid-stride loops, index maths, warp shuffles, shared memory,
barriers, the tiled matmul) unchecked. This module runs that logic: it takes a
kernel's IR *after* the NVPTX O3 pipeline (the IR the PTX is printed from),
retargets it to the host and runs every CUDA thread of a block as a
cooperative thread of its own (a stack of its own, on the launching OS thread),
so divergence, barriers and shuffles behave as they do on a device:

- the special registers (``tid``, ``ntid``, ``ctaid``, ``nctaid``) are read
  from the running CUDA thread's context, found with ``pthread_getspecific``;
- ``__syncthreads()`` is a counting barrier over the block's threads: a thread
  that arrives before the last one yields to the scheduler until it is released;
- ``shfl.sync.bfly`` is a write to a per-warp buffer between two waits on the
  warp's barrier (all 32 lanes take part, as the full mask says);
- ``__shared__`` memory is the module's global, reused by one block after the
  other (blocks run in turn).

The scheduler resumes the block's unfinished threads in turn; each runs until it
waits on a barrier or returns. A round in which no thread arrives at a barrier or
returns means that the waiting threads wait for ones that never come: such a
block, which hangs on a GPU, raises here at once. A context switch saves the
callee-saved registers and swaps stack pointers (a few instructions of assembly
for x86-64 and AArch64, no system call), so a barrier costs a switch per thread.

Machine code comes from llvmlite's JIT with no IR optimisation of its own, so
what runs is what NVPTX was given. The runtime (special registers, barriers,
shuffle, scheduler) is linked once per process; a kernel's object code holds
the kernel and an entry that calls it with its pointers. Linux on x86-64 or AArch64 only;
`available()` says whether this host is one. Kernels with no barrier or shuffle
run their threads one after the other, on the caller's stack.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import platform
import re
import sys
import threading

import numpy as np
from llvmlite import ir

from ...codegen.errors import CompileError
from ...codegen.kernel import counted_loop
from ...codegen.linker import Linker
from ...codegen.machine import selected
from ...codegen.memo import BoundedMemo

SREGS = [f"{r}.{a}" for r in ("tid", "ntid", "ctaid", "nctaid") for a in "xyz"]
# A CUDA thread's context: the 12 special registers, then its block's shuffle buffer, warp barriers and block
# barrier (``__syncthreads``), the kernel's arguments, the launch's scheduler record, the thread's saved stack
# pointer, the top of its stack, and whether it has returned.
SHUFFLE_BUFFER, WARP_BARRIERS, BLOCK_BARRIER, ARGUMENTS, SCHEDULER, SAVED_SP, STACK_TOP, STATE, CONTEXT_WORDS = \
    range(12, 21)
RUNNING, DONE = 0, 1
# The launch's scheduler record: the scheduler's saved stack pointer, arrivals and returns so far, and the
# kernel's entry (``void entry(i8** arguments)``, made per kernel, which calls the kernel with its pointers).
SCHEDULER_SP, PROGRESS, ENTRY, SCHEDULER_WORDS = range(4)
ARRIVED, GENERATION, COUNT, BARRIER_WORDS = range(4)  # a barrier: threads waiting, times released, threads it takes
WARP = 32
# A CUDA thread's stack: the kernels' frames are small, but a signal handled while a thread runs pushes its frame
# (with the vector registers' state) there too. Only the pages a thread touches take memory; below each stack a
# page with no access turns an overflow into a crash instead of a write into the next thread's stack.
STACK_BYTES = 64 * 1024
KERNEL = "jitorch_emu_kernel"  # every kernel's name in its host module, so that its entry is built once per arity
CALLS = [f"jitorch_emu_sreg_{r.replace('.', '_')}" for r in SREGS] + [
    "jitorch_emu_barrier0", "jitorch_emu_barrier_all", "jitorch_emu_shfl_bfly"]  # the runtime's, from kernels

# The context switch, ``jitorch_emu_switch(i64 *save, i64 sp)`` (glibc's swapcontext would do as well, but it
# makes a system call, for the signal mask, at every switch: a reduction switches thousands of times a block): push the callee-saved registers, store the stack
# pointer at ``save``, load ``sp``, pop the registers saved there and return to the address below them. A new
# thread's stack holds a frame of zeros with its start function in the return address's slot (FRAMES).
_SWITCH = {
    "x86_64": """
        pushq %rbp
        pushq %rbx
        pushq %r12
        pushq %r13
        pushq %r14
        pushq %r15
        movq %rsp, (%rdi)
        movq %rsi, %rsp
        popq %r15
        popq %r14
        popq %r13
        popq %r12
        popq %rbx
        popq %rbp
        retq""",
    "aarch64": """
        sub sp, sp, #176
        stp x19, x20, [sp, #0]
        stp x21, x22, [sp, #16]
        stp x23, x24, [sp, #32]
        stp x25, x26, [sp, #48]
        stp x27, x28, [sp, #64]
        stp x29, x30, [sp, #80]
        stp d8, d9, [sp, #96]
        stp d10, d11, [sp, #112]
        stp d12, d13, [sp, #128]
        stp d14, d15, [sp, #144]
        mov x9, sp
        str x9, [x0]
        mov sp, x1
        ldp x19, x20, [sp, #0]
        ldp x21, x22, [sp, #16]
        ldp x23, x24, [sp, #32]
        ldp x25, x26, [sp, #48]
        ldp x27, x28, [sp, #64]
        ldp x29, x30, [sp, #80]
        ldp d8, d9, [sp, #96]
        ldp d10, d11, [sp, #112]
        ldp d12, d13, [sp, #128]
        ldp d14, d15, [sp, #144]
        add sp, sp, #176
        ret""",
}
# (frame words below the stack's top, the word holding the return address): on x86-64 six registers, the return
# address and an empty slot, so that the start function finds the stack as a call leaves it (8 below 16-aligned).
FRAMES = {"x86_64": (8, 6), "aarch64": (22, 11)}

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
WORDS = I64.as_pointer()

_lock = threading.Lock()
_state: dict = {}
# NVPTX IR -> its EmulatedKernel, whose host code stays linked while it is held: a process that keeps making
# kernels (the fuzzer on the fake device makes about ten a program) keeps the most recently used ones only.
# A launch holds its kernel, so dropping one here never frees running code.
EMULATED_LIMIT = 256
_programs = BoundedMemo(EMULATED_LIMIT, size=lambda program: 1)


def _libc():
    if "libc" not in _state:
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _state["libc"] = libc
    return _state["libc"]


def available():
    """Whether this host can emulate kernels: Linux on a CPU the context switch is written for."""
    return sys.platform.startswith("linux") and platform.machine() in _SWITCH


def _runtime():
    """The JIT, and the runtime every kernel calls into: linked once per process (see `_runtime_text`), with the
    addresses of the functions kernels call and the launch."""
    with _lock:
        if "linker" not in _state:
            _state.update(_link_runtime())
    return _state


def _link_runtime():
    import llvmlite.binding as llvm
    llvm.initialize_native_asmparser()  # for the context switch's assembly
    # The selected CPU, as the CPU target uses: without F16C, half conversions are calls into jitorch's
    # builtins, which the linker provides.
    machine = selected()
    libc = _libc()
    key = ctypes.c_uint()
    if libc.pthread_key_create(ctypes.byref(key), None):
        raise RuntimeError("kernel emulator: pthread_key_create failed")
    symbols = {name: ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
               for name in ("pthread_getspecific", "pthread_setspecific")}
    linker = Linker(machine, opt=0, codemodel="jitdefault")
    tm = machine.target_machine(opt=0, codemodel="jitdefault")
    module = llvm.parse_assembly(_runtime_text(key.value, machine.triple.split("-")[0]))
    module.triple = machine.triple
    module.data_layout = str(tm.target_data)
    library = linker.link(tm.emit_object(module), CALLS + ["jitorch_emu_launch"], symbols, fresh=True)
    launch = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)(
        library["jitorch_emu_launch"])
    return dict(linker=linker, machine=machine, tm=tm, runtime=library, launch=launch,
                calls={name: library[name] for name in CALLS})


def host_ir(nvptx_ir):
    """A kernel's NVPTX IR with its GPU intrinsics turned into calls to the emulator's runtime."""
    text = nvptx_ir
    for pattern, replacement in _RENAMES:
        text = pattern.sub(replacement, text)
    unknown = sorted(set(_NVVM.findall(text)))
    if unknown:
        raise CompileError(f"kernel emulator: no host version of {', '.join(unknown)}")
    return text


def _switch_asm(arch):
    """``jitorch_emu_switch`` as module-level assembly: a local symbol of each kernel's object code."""
    lines = [".text", ".p2align 4", ".type jitorch_emu_switch,@function", "jitorch_emu_switch:",
             *(line.strip() for line in _SWITCH[arch].strip().splitlines()),
             ".size jitorch_emu_switch, .-jitorch_emu_switch"]
    return "".join(f'module asm "{line}"\n' for line in lines)


def _runtime_text(key, arch):
    """The special registers, barriers and shuffle over the running thread's context, and the launch: every
    block in turn, its threads either called one after the other (a kernel with no barrier or shuffle) or
    started on their stacks and resumed in turn until all have returned (see the module docstring). The
    kernel is called through its entry, found in the launch's scheduler record."""
    m = ir.Module(name="jitorch_emulator_runtime")
    getspecific = ir.Function(m, ir.FunctionType(PTR, [I32]), "pthread_getspecific")
    setspecific = ir.Function(m, ir.FunctionType(I32, [I32, PTR]), "pthread_setspecific")
    switch = ir.Function(m, ir.FunctionType(ir.VoidType(), [WORDS, I64]), "jitorch_emu_switch")

    def context(b):
        return b.bitcast(b.call(getspecific, [I32(key)]), WORDS)

    def slot(b, words, i):
        return b.gep(words, [I64(i) if isinstance(i, int) else i])

    def word(b, words, i):
        return b.load(slot(b, words, i))

    def words_at(b, words, i):
        return b.inttoptr(word(b, words, i), WORDS)

    def add(b, words, i, delta):
        b.store(b.add(word(b, words, i), I64(delta)), slot(b, words, i))

    def to_scheduler(b, ctx, scheduler):
        """Save this thread's place and switch to the scheduler, which resumes it here (or never)."""
        b.call(switch, [slot(b, ctx, SAVED_SP), word(b, scheduler, SCHEDULER_SP)])

    def wait(b, ctx, barrier):
        """Arrive at ``barrier``; the last thread to arrive releases the others, which yield until released."""
        scheduler = words_at(b, ctx, SCHEDULER)
        add(b, scheduler, PROGRESS, 1)
        generation = word(b, barrier, GENERATION)
        arrived = b.add(word(b, barrier, ARRIVED), I64(1))
        with b.if_else(b.icmp_signed("==", arrived, word(b, barrier, COUNT))) as (last, early):
            with last:
                b.store(I64(0), slot(b, barrier, ARRIVED))
                b.store(b.add(generation, I64(1)), slot(b, barrier, GENERATION))
            with early:
                b.store(arrived, slot(b, barrier, ARRIVED))
                waiting = b.append_basic_block("waiting")
                released = b.append_basic_block("released")
                b.branch(waiting)
                b.position_at_end(waiting)
                to_scheduler(b, ctx, scheduler)
                b.cbranch(b.icmp_signed("==", word(b, barrier, GENERATION), generation), waiting, released)
                b.position_at_end(released)

    for i, reg in enumerate(SREGS):
        fn = ir.Function(m, ir.FunctionType(I32, []), "jitorch_emu_sreg_" + reg.replace(".", "_"))
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(b.trunc(word(b, context(b), i), I32))

    for name, params in (("jitorch_emu_barrier0", []), ("jitorch_emu_barrier_all", [I32])):
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), params), name)
        b = ir.IRBuilder(fn.append_basic_block())
        ctx = context(b)
        wait(b, ctx, words_at(b, ctx, BLOCK_BARRIER))
        b.ret_void()

    fn = ir.Function(m, ir.FunctionType(I32, [I32] * 4), "jitorch_emu_shfl_bfly")
    _mask, value, lane_mask, _clamp = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    ctx = context(b)
    tid = word(b, ctx, 0)
    buffer = b.bitcast(words_at(b, ctx, SHUFFLE_BUFFER), I32.as_pointer())
    b.store(value, b.gep(buffer, [tid]))
    warp_barrier = b.gep(words_at(b, ctx, WARP_BARRIERS), [b.mul(b.lshr(tid, I64(5)), I64(BARRIER_WORDS))])
    wait(b, ctx, warp_barrier)
    source = b.xor(tid, b.zext(lane_mask, I64))  # the lane mask is below 32: the same warp
    result = b.load(b.gep(buffer, [source]))
    wait(b, ctx, warp_barrier)  # nobody overwrites the buffer before every lane has read it
    b.ret(result)

    entry_type = ir.FunctionType(ir.VoidType(), [PTR.as_pointer()])

    def run_kernel(b, ctx, scheduler):
        entry = b.inttoptr(word(b, scheduler, ENTRY), entry_type.as_pointer())
        b.call(entry, [b.inttoptr(word(b, ctx, ARGUMENTS), PTR.as_pointer())])

    # A thread's start: run the kernel, say so, and leave for the scheduler, never to be resumed.
    start = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "jitorch_emu_start")
    start.linkage = "internal"
    b = ir.IRBuilder(start.append_basic_block())
    ctx = context(b)
    scheduler = words_at(b, ctx, SCHEDULER)
    run_kernel(b, ctx, scheduler)
    b.store(I64(DONE), slot(b, ctx, STATE))
    add(b, scheduler, PROGRESS, 1)
    to_scheduler(b, ctx, scheduler)
    b.unreachable()

    fn = ir.Function(m, ir.FunctionType(I64, [WORDS, I64, I64, WORDS]), "jitorch_emu_launch")
    contexts, threads, serial, scheduler = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    first = contexts  # thread 0's: it holds the grid's size, and a block of a serial kernel runs in it
    running = b.alloca(I64)  # in the entry block: an alloca in a loop would take stack every time round
    frame_words, return_slot = FRAMES[arch]
    start_address = b.ptrtoint(start, I64)

    def thread_context(b, t):
        return b.gep(contexts, [b.mul(t, I64(CONTEXT_WORDS))])

    def set_block(b, ctx, ctaid):
        for axis, index in zip("xyz", ctaid):
            b.store(index, slot(b, ctx, SREGS.index(f"ctaid.{axis}")))

    def serial_block(b, ctaid):
        b.call(setspecific, [I32(key), b.bitcast(first, PTR)])
        set_block(b, first, ctaid)

        def one_thread(b, t):
            b.store(t, slot(b, first, 0))
            run_kernel(b, first, scheduler)
        counted_loop(b, I64(0), serial, I64(1), one_thread, "serial")

    def scheduled_block(b, ctaid, flat):
        def prepare(b, t):
            ctx = thread_context(b, t)
            set_block(b, ctx, ctaid)
            b.store(I64(RUNNING), slot(b, ctx, STATE))
            sp = b.sub(word(b, ctx, STACK_TOP), I64(8 * frame_words))
            frame = b.inttoptr(sp, WORDS)
            for i in range(frame_words):
                b.store(start_address if i == return_slot else I64(0), slot(b, frame, i))
            b.store(sp, slot(b, ctx, SAVED_SP))
        counted_loop(b, I64(0), threads, I64(1), prepare, "prepare")
        round_head = b.append_basic_block("round")
        b.branch(round_head)
        b.position_at_end(round_head)
        before = word(b, scheduler, PROGRESS)
        b.store(I64(0), running)

        def resume(b, t):
            ctx = thread_context(b, t)
            with b.if_then(b.icmp_signed("==", word(b, ctx, STATE), I64(RUNNING))):
                b.call(setspecific, [I32(key), b.bitcast(ctx, PTR)])
                b.call(switch, [slot(b, scheduler, SCHEDULER_SP), word(b, ctx, SAVED_SP)])
                b.store(b.add(b.load(running), b.zext(b.icmp_signed("==", word(b, ctx, STATE), I64(RUNNING)), I64)),
                        running)
        counted_loop(b, I64(0), threads, I64(1), resume, "resume")
        block_done, unfinished = b.append_basic_block("block_done"), b.append_basic_block("unfinished")
        b.cbranch(b.icmp_signed("==", b.load(running), I64(0)), block_done, unfinished)
        b.position_at_end(unfinished)
        with b.if_then(b.icmp_signed("==", word(b, scheduler, PROGRESS), before)):
            b.ret(b.add(flat, I64(1)))  # nobody arrived or returned: the waiting threads wait forever
        b.branch(round_head)
        b.position_at_end(block_done)

    def one_block(b, ctaid):
        x, y, z = ctaid
        nx, ny = (word(b, first, SREGS.index(f"nctaid.{a}")) for a in "xy")
        flat = b.add(b.mul(b.add(b.mul(z, ny), y), nx), x)
        with b.if_else(b.icmp_signed("!=", serial, I64(0))) as (one_by_one, scheduled):
            with one_by_one:
                serial_block(b, ctaid)
            with scheduled:
                scheduled_block(b, ctaid, flat)

    def over(axis, inner):
        def loop(b, outer):
            return counted_loop(b, I64(0), word(b, first, SREGS.index(f"nctaid.{axis}")), I64(1),
                                lambda b, i: inner(b, {**outer, axis: i}), axis)
        return loop

    over("z", over("y", over("x", lambda b, ctaid: one_block(b, (ctaid["x"], ctaid["y"], ctaid["z"])))))(b, {})
    b.ret(I64(0))
    return str(m) + _switch_asm(arch)


@functools.lru_cache(maxsize=None)
def _entry_text(n_args):
    """``jitorch_emu_entry(i8** arguments)``, which calls the kernel with its ``n_args`` pointers."""
    m = ir.Module(name="jitorch_emulator_entry")
    kernel = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR] * n_args), KERNEL)
    entry = ir.Function(m, ir.FunctionType(ir.VoidType(), [PTR.as_pointer()]), "jitorch_emu_entry")
    b = ir.IRBuilder(entry.append_basic_block())
    b.call(kernel, [b.load(b.gep(entry.args[0], [I64(i)])) for i in range(n_args)])
    b.ret_void()
    return str(m)


def _map_stacks(threads):
    """The base of ``threads`` fresh stacks (see STACK_BYTES), one after the other, each above its guard page."""
    libc = _libc()
    size = threads * STACK_BYTES
    base = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"kernel emulator: no memory for the stacks of {threads} threads")
    for t in range(threads):
        if libc.mprotect(base + t * STACK_BYTES, mmap.PAGESIZE, 0):
            libc.munmap(base, size)
            raise MemoryError("kernel emulator: mprotect failed on a stack's guard page")
    return base


@contextlib.contextmanager
def _stacks(threads):
    """The tops of ``threads`` stacks for one launch: a set an earlier launch of as many threads gave back, or
    fresh ones. Mapping them costs a system call per guard page (about 1 ms for 256 threads, as much as the
    rest of a launch), so a few sets are kept for the next launch; the others are unmapped."""
    with _stacks_lock:
        idle = _idle_stacks.get(threads)
        base = idle.pop() if idle else None
    if base is None:
        base = _map_stacks(threads)
    try:
        yield base + STACK_BYTES * np.arange(1, threads + 1, dtype=np.int64)
    finally:
        with _stacks_lock:
            idle = _idle_stacks.setdefault(threads, [])
            kept = len(idle) < IDLE_STACKS
            if kept:
                idle.append(base)
        if not kept:
            _libc().munmap(base, threads * STACK_BYTES)


MAP_NORESERVE = 0x4000  # Linux, every architecture: virtual stack space commits only the pages touched
IDLE_STACKS = 2  # sets of stacks kept per thread count (a launch on each of two OS threads at once)
_stacks_lock = threading.Lock()
_idle_stacks: dict[int, list[int]] = {}  # thread count -> bases of mapped sets no launch is using


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
        module.link_in(llvm.parse_assembly(_entry_text(n_args)))
        module.triple = state["machine"].triple
        module.data_layout = str(state["tm"].target_data)
        with _lock:
            obj = state["tm"].emit_object(module)
        self._library = state["linker"].link(obj, ["jitorch_emu_entry"], state["calls"], fresh=True)
        self._entry = self._library["jitorch_emu_entry"]
        self.name = name
        self.n_args = n_args
        # Threads that never wait for each other give the same results run one after the other.
        self.serial = "@jitorch_emu_barrier" not in text and "@jitorch_emu_shfl" not in text
        self._launch_lock = threading.Lock()  # one launch at a time: the shared memory is one global

    def __call__(self, pointers, grid, block):
        """Run on device ``pointers`` (host addresses here) with ``grid`` blocks (x, y, z) of ``block`` threads."""
        if len(pointers) != self.n_args:
            raise ValueError(f"kernel {self.name} takes {self.n_args} pointers, got {len(pointers)}")
        if block % WARP:
            raise ValueError(f"kernel emulator: {block} threads per block is not a whole number of warps")
        grid = tuple(grid) + (1,) * (3 - len(grid))
        with self._launch_lock:
            threads = 1 if self.serial else block
            contexts = np.zeros((threads, CONTEXT_WORDS), np.int64)
            shuffles = np.zeros(block, np.int32)
            barriers = np.zeros((block // WARP + 1, BARRIER_WORDS), np.int64)
            barriers[:, COUNT] = WARP
            barriers[-1, COUNT] = block
            scheduler = np.zeros(SCHEDULER_WORDS, np.int64)
            scheduler[ENTRY] = self._entry
            args = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
            contexts[:, 0] = np.arange(threads)
            contexts[:, 3:6] = (block, 1, 1)
            contexts[:, 9:12] = grid
            contexts[:, SHUFFLE_BUFFER] = shuffles.ctypes.data
            contexts[:, WARP_BARRIERS] = barriers.ctypes.data
            contexts[:, BLOCK_BARRIER] = barriers[-1:].ctypes.data
            contexts[:, ARGUMENTS] = ctypes.addressof(args)
            contexts[:, SCHEDULER] = scheduler.ctypes.data
            with contextlib.nullcontext() if self.serial else _stacks(threads) as tops:
                if tops is not None:
                    contexts[:, STACK_TOP] = tops
                stuck = _state["launch"](contexts.ctypes.data, threads, block if self.serial else 0,
                                     scheduler.ctypes.data)
        if stuck:
            rows, x = divmod(stuck - 1, grid[0])
            z, y = divmod(rows, grid[1])
            waiting = int((contexts[:, STATE] == RUNNING).sum())
            raise RuntimeError(f"kernel {self.name} did not finish: in block {(x, y, z)}, {waiting} threads wait on "
                               f"a barrier or shuffle that others of the block never reach ({block - waiting} "
                               "have returned)")

    def __repr__(self):
        return f"<emulated kernel {self.name}>"


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
