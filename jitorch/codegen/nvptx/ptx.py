"""PTX for kernel sources: verify, check intrinsics, optimise (O3) and emit with LLVM's NVPTX backend.

LLVM aborts the process on what NVPTX cannot select (``llvm.exp`` and friends,
see shared/LLVM-NOTES.md), so every module is checked against `ALLOWED`
before it reaches the backend: anything else is a `CompileError`. PTX is
cached in memory and on disk (the kernel cache), keyed by the kernel's LLVM
IR and the target, so a second process skips LLVM.

The PTX targets ``sm_80`` with PTX ISA 7.0, which every driver since CUDA 11.0
loads; the driver compiles it for the GPU at hand (``sm_80`` and newer).
"""

from __future__ import annotations

import re
import threading

from ...runtime import logs
from ..errors import CompileError
from ..llvm_module import optimised_module
from ..mathlib import ALLOWED_INTRINSICS as _MATH
from ..memo import BoundedMemo
from .target import BLOCK, TRIPLE

SM = "sm_80"
PTX_ISA = "+ptx70"
# LLVM intrinsics the NVPTX backend selects for every type jitorch kernels use.
ALLOWED = _MATH | {"llvm.nvvm.read.ptx.sreg.", "llvm.nvvm.barrier0", "llvm.nvvm.shfl.sync.bfly.i32",
                   "llvm.memcpy", "llvm.memset", "llvm.lifetime", "llvm.smax", "llvm.smin", "llvm.umax",
                   "llvm.umin", "llvm.abs"}
_DECLARE = re.compile(r"^declare[^@]*@\"?(llvm\.[\w.$]+)", re.M)
_lock = threading.Lock()
_state: dict = {}
# cache key -> PTX text, in front of the kernel cache (which checks each entry against its source, and
# reads the disk): bounded in characters, since a process that keeps making kernels of new shapes would
# otherwise keep every one's PTX; a dropped entry comes back from the disk cache.
PTX_MEMORY_LIMIT = 16 << 20
_memory = BoundedMemo(PTX_MEMORY_LIMIT)
# The optimised IR of the kernels ptx_of last compiled: the emulator runs it right after (`llvm_ir`), and O3
# twice over the same module would double the cost of every emulated kernel. A few suffice; more would only
# hold text on a GPU, which never asks.
RECENT_OPTIMISED = 64
_recent_optimised = BoundedMemo(RECENT_OPTIMISED, size=lambda text: 1)


def _machine():
    if not _state:
        import llvmlite.binding as llvm
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple(TRIPLE)
        _state["tm"] = target.create_target_machine(cpu=SM, features=PTX_ISA, opt=3)
    return _state["tm"]


def target_id():
    """What, besides the IR, decides the PTX: part of every cache key."""
    return f"{TRIPLE}|{SM}|{PTX_ISA}"


def check_intrinsics(module_text):
    """CompileError for a declared LLVM intrinsic outside `ALLOWED` (it could abort the process)."""
    for name in _DECLARE.findall(module_text):
        if not any(name == a or name.startswith(a + ".") or (a.endswith(".") and name.startswith(a))
                   for a in ALLOWED):
            raise CompileError(f"intrinsic {name} has no NVPTX lowering jitorch allows")


def optimise(module_text):
    """The verified, O3-optimised llvmlite module of a kernel's IR for NVPTX."""
    check_intrinsics(module_text)
    return optimised_module(module_text, TRIPLE, _machine())


def optimised_text(module_text):
    """The optimised LLVM IR of a kernel module as text (what its PTX is emitted from)."""
    with _lock:
        text = _recent_optimised.get(module_text)
        return str(optimise(module_text)) if text is None else text


def _emit_ptx(module_text):
    """PTX from LLVM, keeping the optimised IR it was emitted from among the recent ones."""
    module = optimise(module_text)
    _recent_optimised.put(module_text, str(module))
    return _machine().emit_assembly(module)


def ptx_of(module_text, name, cache=None):
    """The PTX of a kernel module, from memory, the disk cache, or LLVM."""
    from ..cache import cache_key
    key = cache_key(module_text, target_id())
    # A file's PTX, which its caller trusted, serves that program alone (not memoised for others).
    foreign = cache is not None and cache.supplies_foreign(key)
    ptx = None if foreign else _memory.get(key)
    if ptx is not None:
        return ptx
    with _lock:
        data = cache.get(key, module_text) if cache is not None else None
        if data is None:
            data = _emit_ptx(module_text).encode()
            if cache is not None:
                cache.put(key, data, module_text)
            logs.log("codegen", "compiled %s to PTX", name)
        ptx = data.decode()
        if not foreign:
            _memory.put(key, ptx)
    return ptx


class GeneratedKernel:
    """What every CUDA kernel object shares: its LLVM IR as generated (``source_ir``) and, computed on first
    use, the optimised IR its PTX is emitted from (``llvm_ir``: what `.lower()` shows and the emulator runs)."""

    source_ir: str
    _llvm_ir = None

    @property
    def llvm_ir(self):
        if self._llvm_ir is None:
            self._llvm_ir = optimised_text(self.source_ir)
        return self._llvm_ir


class PtxKernel(GeneratedKernel):
    """A kernel built from a fused group, as PTX, with what a launch needs: its entry name, buffers and grid
    shape."""

    def __init__(self, source, ptx):
        self.source = source
        self.source_ir = source.llvm_ir
        self.name = source.name
        self.ops = source.ops
        self.asm = ptx
        self.outer = source.outer
        self.mode = source.mode

    def grid(self, multiprocessors=132):
        """(blocks, threads per block) for a device with this many multiprocessors: every outer
        iteration gets a thread (or a block), up to 32 resident blocks per multiprocessor, beyond
        which the grid-stride loop takes over."""
        items = -(-self.outer // BLOCK) if self.mode == "thread" else self.outer
        return max(1, min(items, 32 * multiprocessors)), BLOCK

    def __repr__(self):
        return f"<cuda kernel {self.name}: {' '.join(self.ops)}>"


def ptx_kernel(source, cache=None):
    """A `PtxKernel` for a kernel source built with the NVPTX target."""
    try:
        return PtxKernel(source, ptx_of(source.llvm_ir, source.name, cache))
    except RuntimeError as e:  # LLVM refused a module that passed the checks: say which kernel
        raise CompileError(f"NVPTX code generation failed for {source.name}: {e}") from e
