"""Machine code is returned: dropping the last compiled function that uses a kernel removes its code
from the JIT, kernels still in use keep working, and JITs that have linked many libraries are retired."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest

import jitorch
from jitorch.codegen import cpu
from jitorch.codegen.linker import Linker
from jitorch.codegen.machine import selected

ROOT = Path(__file__).resolve().parents[2]

# A subprocess builds and drops compiled functions. LLVM compiles each of KERNELS kernels once (the growth
# over the last 50 of them is measured: a distinct graph compiled in a long-running process), then FUNCTIONS
# compiled functions are built over them and dropped: each links its own copy of its kernel's machine code,
# from the kernel cache, since the last function that used that kernel is gone. KERNELS is more than the
# functions freed together (25); FUNCTIONS is enough for a JIT to fill (Linker.LIBRARIES_PER_JIT) and be
# retired after the measurement at function 200.
BUILD_AND_DROP = """
import gc, json, os
import jitorch
from jitorch.codegen import cpu

KERNELS, FUNCTIONS = 60, 600
x = jitorch.tensor(1.0)
linker = cpu._init()["linker"]
links, link = [], linker.link
linker.link = lambda *a, **k: links.append(1) or link(*a, **k)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_and_drop(i):
    c = float(i % KERNELS) + 0.5
    assert float(jitorch.compile(lambda t: t + c)(x)) == c + 1.0


kept = jitorch.compile(lambda t: t * 3.0 - 1.0)
assert float(kept(x)) == 2.0
for i in range(KERNELS):
    build_and_drop(i)
    if i == 9:
        gc.collect()
        warm = rss_mb()
gc.collect()
per_kernel_kb = (rss_mb() - warm) * 1024 / (KERNELS - 10)
compiled = len(links)
for i in range(FUNCTIONS):
    build_and_drop(i)
    if i % 25 == 24:  # compiled functions live in reference cycles: free them at a steady pace
        gc.collect()
    if i == 199:
        after_200 = rss_mb()
gc.collect()
assert float(kept(x)) == 2.0
print(json.dumps({"compiled": compiled, "per_kernel_kb": per_kernel_kb, "relinked": len(links) - compiled,
                  "after_200": after_200,
                  "end": rss_mb(), "alive": len(cpu._linked)}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set size from /proc")
def test_dropped_compiled_functions_free_their_machine_code(tmp_path):
    env = {**os.environ, "JITORCH_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", BUILD_AND_DROP], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    stats = json.loads(done.stdout)
    assert stats["compiled"] == 61
    # Compiling a new kernel grew the process by about 48 KB while llvmlite's pass managers were kept; now by
    # under 1 KB (the 2 KB llvmlite's pass builder never frees, and the bounded memos filling, mostly fit in
    # the heap the freed pass managers leave). The minimum versions (llvmlite 0.44, NumPy 1.26) measured 20.6 KB
    # on CI, still well under the leak's 48.
    assert stats["per_kernel_kb"] < 32, stats
    # Each function linked its kernel anew: the code of the last function using it was gone.
    assert stats["relinked"] == 600, stats
    assert stats["alive"] == 1, stats  # only the kernel of the function still held
    # Code kept for every dropped function grew the process by about 48 KB each (19 MB over 400); now
    # about 2 MB over 400 (a JIT's emptied libraries, until it is retired, and the cache's memory layer).
    assert stats["end"] - stats["after_200"] < 8, stats


def _add(c, x):
    return jitorch.compile(lambda t: t + c)(x)


def _code(fn, x):
    return fn.lower(x).kernels[0]._kernel._code


def test_a_kernel_shared_by_two_functions_lives_until_both_are_dropped():
    x = jitorch.arange(5.0)
    first, second = (jitorch.compile(lambda t: t * 7.25 + 1.0) for _ in range(2))
    first(x), second(x)
    code = _code(first, x)
    assert _code(second, x) is code  # linked once, used by both
    gone = weakref.ref(code)
    del first, code
    gc.collect()
    assert gone() is not None
    assert second(x).tolist() == [1.0, 8.25, 15.5, 22.75, 30.0]
    del second
    gc.collect()
    assert gone() is None


def test_a_kernel_dropped_and_compiled_again_is_linked_again_and_runs():
    x = jitorch.arange(3.0)
    f = jitorch.compile(lambda t: t * 9.5 - 2.0)
    assert f(x).tolist() == [-2.0, 7.5, 17.0]
    gone = weakref.ref(_code(f, x))
    del f
    gc.collect()
    assert gone() is None
    g = jitorch.compile(lambda t: t * 9.5 - 2.0)
    assert g(x).tolist() == [-2.0, 7.5, 17.0]


def test_linker_moves_to_a_fresh_jit_and_frees_the_old_one_with_its_last_library():
    x = jitorch.arange(4.0)
    f = jitorch.compile(lambda t: t * 2.0 + 0.5)
    f(x)
    source = f.lower(x).kernels[0]._kernel.source
    obj = cpu.emit_object(source)
    linker = Linker(selected(), opt=3, codemodel="jitdefault")
    linker.LIBRARIES_PER_JIT = 2
    libraries = [linker.link(obj, [source.name]) for _ in range(3)]
    assert libraries[0]._jit is libraries[1]._jit is not libraries[2]._jit
    for library in libraries:
        assert _run(library, source, x) == [0.5, 2.5, 4.5, 6.5]
    old = weakref.ref(libraries[0]._jit)
    del libraries[:2]
    gc.collect()
    assert old() is None
    assert _run(libraries[0], source, x) == [0.5, 2.5, 4.5, 6.5]


def _run(library, source, x):
    out = jitorch.empty(4)
    args = (ctypes.c_void_p * 2)(x.data_ptr(), out.data_ptr())
    cpu.ENTRY(library[source.name])(args, 0, source.outer)
    return out.tolist()


def _reachable(root, limit=200_000):
    """The objects reachable from ``root`` through data (not through functions, classes or modules, which
    lead to everything)."""
    seen, todo = {id(root): root}, [root]
    stop = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    while todo and len(seen) < limit:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) not in seen and not isinstance(ref, stop):
                seen[id(ref)] = ref
                todo.append(ref)
    return list(seen.values())


def test_a_compiled_kernel_keeps_its_llvm_ir_as_text_not_as_llvmlite_objects():
    """llvmlite's objects of a module weigh several times its text, and a kernel lives as long as the
    compiled functions that use it (a CUDA backend's kernel tables hold thousands)."""
    x = jitorch.arange(6.0)
    f = jitorch.compile(lambda t: (t * 1.375).sin() + 0.5)
    f(x)
    kernel = f.lower(x).kernels[0]._kernel
    assert "define" in kernel.source.llvm_ir
    held = [o for o in _reachable(kernel) if type(o).__module__.startswith("llvmlite.ir")]
    assert not held, held[:5]
