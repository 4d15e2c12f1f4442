"""The CPU target: optimise a kernel module, make machine code, call it in chunks on threads.

One `Linker` per process links every kernel into llvmlite's ORC JIT (which
lets a target machine be reused and libraries be added and removed at will;
see shared/LLVM-NOTES.md). A kernel's machine code lives as long as the
compiled kernels that use it: dropping the last compiled function that holds
it removes it from the JIT. Object code is cached keyed by the kernel's LLVM
IR and the target, so relinking a dropped kernel, or a second process, loads
machine code without running LLVM's optimiser. Calls go through ctypes, which
releases the GIL, so chunks of a kernel's outer loop run in parallel on the
threads of ``runtime.threads.run_parts`` (which matrix products' parts share).
"""

from __future__ import annotations

import functools
import re
import weakref

from ..runtime import logs
from ..runtime.array_address import data_address
from ..runtime.threads import KERNEL_ENTRY, STEP_PROGRAM, STEP_PROGRAM_IR, bounds, get_num_threads, run_chunks, run_parts
from ..runtime import threads
from .errors import CompileError
from .linker import Linker
from .llvm_module import optimise_module, optimised_module
from .machine import selected
from ..runtime.forks import module_lock

_lock = module_lock(globals(), "_lock")
_state = {}

ENTRY = KERNEL_ENTRY

# Below this many elements a kernel runs on the calling thread. Split on two threads (`threads.run_chunks`,
# with spinning workers), a GELU chain of 2**15 float32 elements took 26-34 µs against 41-50 whole, one of
# 2**17 87-91 against 158-170; a plain add breaks even near 2**16 (the old pool of futures, 2**18 here, was
# slower split than whole up to 2**17 on this 2-core machine).
PARALLEL_MIN_WORK = 1 << 15
# Each chunk gets at least this many elements: on a machine of many cores, a kernel just over
# PARALLEL_MIN_WORK splits in two, not in as many chunks as there are threads.
CHUNK_MIN_WORK = PARALLEL_MIN_WORK // 2


def num_threads():
    """``jitorch.set_num_threads``'s number, else ``JITORCH_NUM_THREADS``, else the number of cores."""
    return get_num_threads()


def address(a):
    """An array's address (`array_address.data_address`: 0.16 µs, eager kernels pass three to six per call), 0
    for None: a parameter the kernel does not read."""
    return 0 if a is None else data_address(a)


def run_split(fn, address, args, count, work):
    """``fn(args, lo, hi)`` (the machine code at ``address``) over ``range(count)``, ``work`` elements in all:
    whole on the calling thread, else, where there are threads and work enough for each (`CHUNK_MIN_WORK`;
    so never below `PARALLEL_MIN_WORK`), in near-equal chunks on the thread team (`threads.run_chunks`). The
    kernels inside ops (row softmax, eager pointwise compositions, scatter-adds, optimizer blocks, attention
    tiles) split so, each row, element, column, block or tile on one thread."""
    # (below two chunks' work, or one item, there is one part whatever the thread count: the common small
    # eager call need not ask for it)
    parts = 1 if count <= 1 or work < 2 * CHUNK_MIN_WORK else min(num_threads(), count, work // CHUNK_MIN_WORK)
    if parts <= 1:
        fn(args, 0, count)
        return
    run_chunks(address, args, bounds(count, parts))


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
    return optimised_module(module_text, machine.triple, _target_machines(machine)[0])


class CompiledKernel:
    """A kernel in machine code: call it on buffers, over chunks of its outer loop."""

    def __init__(self, source, code):
        self.source = source
        self.name = source.name
        self.ops = source.ops
        self.llvm_ir = code.llvm_ir
        self.asm = None
        self._code = code  # keeps the machine code alive as long as this kernel
        # Valid while this kernel lives: generated calls bind it beside the steps that hold the kernel.
        self.fn = ENTRY(code.address)
        self.address = code.address
        self.outer = source.outer
        self.parallel = source.work >= PARALLEL_MIN_WORK and source.outer > 1

    def __call__(self, args_array):
        """Run on a ctypes array of buffer addresses."""
        self.run_chunks(self.fn, args_array)

    def run_chunks(self, fn, args_array):
        """Run ``fn(args_array, lo, hi)`` over the chunks of the outer loop: all on the calling thread when
        the kernel does not split, else the first chunk there and the others on the workers (``fn`` is the
        machine code, or a profiler's wrapper that times it)."""
        n = min(num_threads(), self.source.work // CHUNK_MIN_WORK)
        if not self.parallel or n <= 1:
            fn(args_array, 0, self.outer)
            return
        step = -(-self.outer // n)
        bounds = [(i, min(i + step, self.outer)) for i in range(0, self.outer, step)]
        if fn is self.fn:
            run_chunks(self.address, args_array, bounds)
        else:
            run_parts(fn, [(args_array, lo, hi) for lo, hi in bounds])

    def __repr__(self):
        return f"<kernel {self.name}: {' '.join(self.ops)}>"


class _Code:
    """A kernel's machine code in the JIT. Kernels share it; when the last one is dropped, its library's
    resource tracker goes and LLVM removes the code from the JIT."""

    __slots__ = ("address", "library", "llvm_ir", "__weakref__")

    def __init__(self, address, library, llvm_ir):
        self.address, self.library, self.llvm_ir = address, library, llvm_ir


# key -> the linked code of every kernel alive, so that two compiled functions with one kernel share
# its code. Weak, so that dropping compiled functions frees machine code; relinking a kernel dropped
# earlier takes its object code from the kernel cache, without LLVM's optimiser.
_linked: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


@functools.lru_cache(maxsize=1024)
def _kernel_key(llvm_ir, target):
    """The kernel cache's key of a kernel's IR for ``target`` (`cache_key` adds jitorch's and llvmlite's
    versions), remembered: `link_batch` and then `link_kernel` ask for each kernel's, and hashing a graph's
    kernels costs milliseconds."""
    from .cache import cache_key
    return cache_key(llvm_ir, target)


def link_kernel(source, cache=None):
    """Machine code for a kernel source, from the kernels alive, the kernel cache, or LLVM."""
    key = _kernel_key(source.llvm_ir, target_id())
    if cache is not None and cache.supplies_foreign(key):
        # A file's code, which its caller trusted, serves that program alone: shared through `_linked`,
        # another program compiling the same IR would run it.
        with _lock:
            return CompiledKernel(source, _link(key, source, cache))
    code = _linked.get(key)
    if code is None:
        with _lock:
            code = _linked.get(key) or _link(key, source, cache)
            _linked[key] = code
    return CompiledKernel(source, code)


def _link(key, source, cache):
    return _link_text(key, source.name, source.llvm_ir, " ".join(source.ops), cache)


def _link_text(key, name, llvm_ir, what, cache):
    """The `_Code` of the function ``name`` of the module ``llvm_ir`` (``what``: what the log calls it), its
    object code from ``cache`` under ``key`` (checked before anything is linked), else made and put there."""
    linker = _init()["linker"]
    obj = _cached_object(key, name, llvm_ir, cache, linker)
    optimised = None
    if obj is None:
        mod = optimise(llvm_ir)
        optimised = str(mod)
        obj = _target_machines(_init()["machine"])[1].emit_object(mod)
        linker.resolve(obj)  # a kernel that cannot link is never cached
        if cache is not None:
            cache.put(key, obj, llvm_ir)
        logs.log("codegen", "compiled %s (%s)", name, what)
    library = linker.link(obj, [name])
    return _Code(library[name], library, optimised)


@functools.cache
def program_cache():
    """Where `step_program` keeps its object code: the kernel cache's folder, through a cache of its own, so that
    `cache.default_cache` 's counts stay the kernels'."""
    from .cache import KernelCache
    return KernelCache()


def link_step_program(cache):
    """The `_Code` of `threads.STEP_PROGRAM_IR` for the selected machine, its object code from ``cache`` (checked as
    a cached kernel's is: it defines that function alone and calls nothing) where an earlier process made it, else
    made by LLVM and put there; CompileError where it cannot be linked."""
    return _link_program("step program", STEP_PROGRAM, STEP_PROGRAM_IR, cache)


def link_runtime_program(name, text, cache):
    """`link_step_program` for one of the runtime's `threads.PROGRAMS` (the function ``name`` of the module
    ``text``)."""
    return _link_program(f"runtime program {name}", name, text, cache)


def _link_program(what, name, text, cache):
    from .cache import cache_key
    return _link_text(cache_key(what, text, target_id()), name, text, what, cache)


def _runtime_program(name, text):
    """`threads.set_program_linker` 's linker: `link_runtime_program` 's code (through `program_cache`), or None
    where it cannot be linked here (logged; the runtime then compiles it with MCJIT)."""
    try:
        return link_runtime_program(name, text, program_cache())
    except (CompileError, RuntimeError) as e:
        logs.log("codegen", "%s compiled by the runtime: %s", name, e)
        return None


threads.set_program_linker(_runtime_program)


@functools.cache
def _step_program_code():
    """`link_step_program` 's code (held for the process), or None where it cannot be linked here."""
    try:
        return link_step_program(program_cache())
    except (CompileError, RuntimeError) as e:
        logs.log("codegen", "no step program: a compiled call runs its kernels one by one: %s", e)
        return None


@functools.cache
def step_program():
    """The native loop that runs a program of kernel calls on the calling thread, each over its own range
    (`threads.STEP_PROGRAM_IR`; `jit.kernel_runs` runs a compiled call's runs of kernels with it), as a
    `KERNEL_ENTRY` function; None where it cannot be linked here. It is linked as a kernel is, from the kernel
    cache's folder where an earlier process made it (`link_step_program`), so a warm process's first compiled call
    runs LLVM for none of its code (MCJIT compiling it with the thread team's functions took 20-25 ms of it)."""
    code = _step_program_code()
    return None if code is None else ENTRY(code.address)


def link_batch(sources, cache=None):
    """Machine code for the kernels among ``sources`` that are not alive, made together:
    one LLVM module, one O3 run, one object and one link for them all (alone, each kernel pays a fixed
    optimiser, emitter and linker cost), cached under a key of their contents. Kernels that differ in
    their name only (a layer's kernels and the next layer's, the optimizer's update of same-shaped
    parameters) are compiled once, so a graph of n equal layers costs about one layer's code. The
    codes join `_linked`, so `link_kernel` then finds each kernel there; `_linked` is weak, so the
    caller holds the returned codes until it has called `link_kernel`. Fewer than two kernels to
    make, or a ``cache`` other than a `KernelCache`: nothing done (`link_kernel` makes each alone)."""
    from .cache import KernelCache, cache_key
    if cache is not None and not isinstance(cache, KernelCache):
        return []  # an export's artifacts: code per kernel, which they serve and count kernel by kernel
    keys = [_kernel_key(source.llvm_ir, target_id()) for source in sources]
    with _lock:
        todo = {key: source for key, source in zip(keys, sources) if _linked.get(key) is None}
        if len(todo) < 2:
            return []
        unnamed = {key: _unnamed(source) for key, source in todo.items()}
        # canonical text -> the position of its entry in the batch module
        bodies = {text: j for j, text in enumerate(dict.fromkeys(unnamed.values()))}
        texts = list(bodies)
        names = [f"jitorch_batch_{j}" for j in range(len(texts))]
        batch_key = cache_key(*texts, target_id())
        source_text = "\n".join(texts)
        linker = _init()["linker"]
        obj = _cached_batch(batch_key, source_text, names, cache, linker)
        if obj is None:
            obj = _target_machines(_init()["machine"])[1].emit_object(_batch_module(texts, names))
            linker.resolve(obj)  # a batch that cannot link is never cached
            if cache is not None:
                cache.put(batch_key, obj, source_text)
            if logs.enabled("codegen"):
                logs.log("codegen", "compiled %d kernels (%d distinct, %d but for their sizes) in one module",
                         len(todo), len(texts), len(size_classes(texts)))
        library = linker.link(obj, names)
        codes = [_Code(library[name], library, None) for name in names]
        for key, text in unnamed.items():
            _linked[key] = codes[bodies[text]]
        return codes


# The entry's name in a kernel's text as `link_batch` compiles it: kernels equal but for their names
# share one text.
_UNNAMED = "jitorch_kernel"


# An integer literal of a kernel's LLVM IR: a loop bound, a stride, an offset, a constant's bits.
_INTEGER = re.compile(r"\b\d+\b")


def size_classes(texts):
    """``texts`` (kernels' LLVM IR) grouped by their text with every integer literal blanked: kernels of one
    class differ at most in their sizes (loop bounds, strides; also in constants, which are rarely the
    difference), so a kernel taking those as arguments could serve the class. For the compile logs: a
    generated sequence's passes over contexts of 1..64 tokens compiled 204 distinct texts of 22 classes."""
    classes = {}
    for text in texts:
        classes.setdefault(_INTEGER.sub("#", text), []).append(text)
    return list(classes.values())


def _unnamed(source):
    """``source``'s LLVM IR with its name (the module's, its entry's and its body's) replaced by one
    fixed name: the builder names nothing else after the kernel."""
    return source.llvm_ir.replace(source.name, _UNNAMED)


def _batch_module(texts, names):
    """One optimised module of every kernel text, each entry renamed to its name in ``names`` (LLVM
    renames the internal helpers, whose names repeat between kernels, as it links)."""
    import llvmlite.binding as llvm
    machine = _init()["machine"]
    combined = None
    for text, name in zip(texts, names):
        module = llvm.parse_assembly(text)
        module.get_function(_UNNAMED).name = name
        if combined is None:
            combined = module
        else:
            combined.link_in(module)
    return optimise_module(combined, machine.triple, _target_machines(machine)[0])


def _cached_batch(key, text, names, cache, linker):
    """The cache's object code of a batch, if it passes the checks made before anything is linked."""
    obj = cache.get(key, text) if cache is not None else None
    if obj is None:
        return None
    try:
        linker.check_object(obj, names)
    except CompileError as e:
        logs.log("codegen", "cached object code of a batch of kernels rejected, recompiling: %s", e)
        return None
    logs.log("codegen", "loaded %d kernels from the kernel cache", len(names))
    return obj


def _cached_object(key, name, llvm_ir, cache, linker):
    """The cache's object code for ``key``, if it passes the checks made before anything is linked."""
    obj = cache.get(key, llvm_ir) if cache is not None else None
    if obj is None:
        return None
    try:
        linker.check_object(obj, [name])
    except CompileError as e:
        logs.log("codegen", "cached object code of %s rejected, recompiling: %s", name, e)
        return None
    logs.log("codegen", "loaded %s from the kernel cache", name)
    return obj


def emit_object(source, machine=None):
    """Object code of a kernel source for ``machine`` (default: the selected one), as `link_kernel` makes
    and caches it; any machine LLVM has a target for, whether or not it could run here."""
    machine = machine or _init()["machine"]
    return _target_machines(machine)[1].emit_object(optimise(source.llvm_ir, machine))


def assembly(source, optimised=None):
    """The target assembly of a kernel source (for `.lower().kernels[i].asm`); ``optimised``: its module
    as `optimise` gave it, where the caller has it already (optimising is most of the cost)."""
    machine = _init()["machine"]
    return _target_machines(machine)[1].emit_assembly(optimised or optimise(source.llvm_ir, machine))
