"""The runtime's programs (`threads.PROGRAMS`: the gemm call and the row program) linked from the kernel cache by
the CPU code generator (`cpu.link_runtime_program`, through `threads.set_program_linker`): a warm process's first
product runs no LLVM code generation (MCJIT compiled them with the thread team's code: 20-25 ms of the GPT step's
warm first call with MKL), and a cache entry is untrusted input."""

import numpy as np
import pytest

from jitorch.codegen import cpu
from jitorch.codegen.cache import KernelCache, cache_key
from jitorch.runtime import blas_library, threads
from tests.jit.test_plan_cache import printed_by_a_fresh_process

pytestmark = pytest.mark.skipif(threads._arch() is None, reason="no native code for programs here")

PRODUCTS = """
import numpy as np
from jitorch.codegen import cpu
from jitorch.runtime import blas_calls, threads
{before}
rng = np.random.default_rng(0)
a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 40)).astype(np.float32)
one, parts, whole = (np.empty((64, 40), np.float32) for _ in range(3))
# parts run MKL's gemm (fixed parts, session 47): compared with MKL's whole call, the lone call with NumPy's
ran = (blas_calls.run_gemm_calls([(a, b, one)], False) and blas_calls.run_gemm_parts(a, b, parts, 1, True)
       and blas_calls.run_gemm_calls([(a, b, whole)], True))
info = cpu.program_cache().info()
print(ran, one.tobytes() == (a @ b).tobytes() and parts.tobytes() == whole.tobytes(), threads._native.cache_info().currsize,
      info.disk_hits, info.misses, info.writes)
"""


def printed(script, cache_dir):
    return printed_by_a_fresh_process(script, cache_dir).split()


def test_a_warm_process_links_the_gemm_call_and_row_program_from_the_cache_and_builds_no_team(tmp_path):
    """A product run as NumPy's gemm call (alone, and as a one-part program) at one thread: the first process makes
    both programs with LLVM and stores them, the next reads both from the cache; neither builds the team's MCJIT
    module, and both compute NumPy's bits."""
    if blas_library.gemm_function(np.dtype(np.float32), 0) is None:
        pytest.skip("no OpenBLAS gemm to call here")
    script = PRODUCTS.format(before="")
    assert printed(script, tmp_path) == ["True", "True", "0", "0", "2", "2"]
    assert printed(script, tmp_path) == ["True", "True", "0", "2", "0", "0"]


def test_without_a_program_linker_the_runtime_compiles_the_programs_itself(tmp_path):
    """Before a code generator sets its linker (eager work, with no `codegen.cpu` loaded; here it is taken away after), the programs are compiled by
    MCJIT here, alone (the team is still not built), and compute the same bits; the kernel cache is not used."""
    script = PRODUCTS.format(before="threads.set_program_linker(None)")
    out = printed(script, tmp_path)
    assert out == ["True", "True", "0", "0", "0", "0"] and not list(tmp_path.rglob("*.jitk"))


@pytest.mark.parametrize("name", sorted(threads.PROGRAMS))
def test_a_damaged_or_foreign_runtime_program_entry_is_a_miss_made_again(tmp_path, name):
    """`cpu.link_runtime_program`: a damaged entry (its checksum fails), or one whose object code checks out as an
    entry but defines another function, is never linked: LLVM makes the program again and stores it."""
    import llvmlite.binding as llvm
    from jitorch.codegen.machine import selected
    text = threads.PROGRAMS[name]

    def new_process():
        cache = KernelCache(tmp_path)
        code = cpu.link_runtime_program(name, text, cache)
        info = cache.info()
        return code.address, (info.disk_hits, info.misses, info.writes)

    assert new_process()[1] == (0, 1, 1)
    (entry,) = tmp_path.rglob("*.jitk")
    stored = entry.read_bytes()
    assert new_process()[1] == (1, 0, 0)
    entry.write_bytes(stored[:-8] + b"\0" * 8)
    assert new_process()[1] == (0, 1, 1) and entry.read_bytes() == stored
    host = selected()
    other = llvm.parse_assembly("define void @another_function() nounwind {\n  ret void\n}\n")
    other.triple = host.triple
    KernelCache(tmp_path).put(cache_key(f"runtime program {name}", text, cpu.target_id()),
                              host.target_machine(opt=0, codemodel="jitdefault").emit_object(other), text)
    assert new_process()[1] == (1, 0, 1) and entry.read_bytes() == stored
