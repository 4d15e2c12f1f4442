"""Which library runs a product by its shape (`runtime.blas_library.mkl_shape`): where MKL is chosen, the float32
products of a transposed ``a`` of 4M elements or more and 64-128 result columns are OpenBLAS's; a product's parts
take the whole product's library; MKL's fixed parts keep 256 rows or columns (`ops.linalg.mkl_parts`). Each case
that depends on the library runs in subprocesses under both (`test_blas_choice46._run`): bits at one and two threads
equal, the chosen path's (`tests.blas_reference.chosen_matmul`), and torch's to float rounding."""

import numpy as np
import pytest

from jitorch.ops import linalg
from jitorch.runtime import blas_library
from tests.runtime.test_blas_choice46 import LIBRARIES, _run

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def test_the_rule_gives_openblas_only_the_large_transposed_float32_shapes_with_64_to_128_columns():
    """The measured class (benchmarks/blas_shapes.py) and its edges: each one step outside it stays MKL's."""
    def mkl(*args, a_transposed=True, dtype=F32):
        return blas_library.mkl_shape(dtype, *args, a_transposed, True)
    assert not mkl(1024, 4096, 128) and not mkl(2048, 2048, 64)
    assert mkl(1024, 4096, 128, a_transposed=False) and mkl(1024, 4096, 128, dtype=F64)
    assert mkl(1024, 4095, 128)  # (a under 2^22 elements)
    assert mkl(1024, 4096, 63) and mkl(1024, 4096, 129)
    assert not blas_library.mkl_shape(F32, 64, 64, 64, False, False)  # (under MKL_MIN_WORK)


def test_the_rule_gives_openblas_96_to_160_rows_times_a_long_b_in_rows():
    """DCGAN's largest product, 128x1024 @ 1024x4096 (``b`` in rows), and the class around it; one step outside
    (95 or 161 rows, 1023 sums, 2047 columns, ``b`` transposed, float64) stays MKL's."""
    def mkl(m, k, n, b_transposed=False, dtype=F32):
        return blas_library.mkl_shape(dtype, m, k, n, False, b_transposed)
    assert not mkl(128, 1024, 4096) and not mkl(96, 4096, 2048) and not mkl(160, 1024, 2048)
    assert not blas_library.mkl_shape(F32, 128, 1024, 4096, True, False)  # (a transposed too: "TN")
    assert mkl(95, 1024, 4096) and mkl(161, 1024, 4096) and mkl(128, 1023, 4096) and mkl(128, 1024, 2047)
    assert mkl(128, 1024, 4096, b_transposed=True) and mkl(128, 1024, 4096, dtype=F64)


def test_mkl_parts_keep_256_rows_or_columns_at_any_thread_count():
    """DCGAN's 256x2048x1024 (columns) went in 8 parts of 128 columns, at 0.72x MKL's whole speed; LSTM's
    700x10000x200 (rows) in 8 of 88 rows, at 0.70x. Two parts at least, as before."""
    assert linalg.mkl_parts(256, 1024, 256 * 2048 * 1024) == 4
    assert linalg.mkl_parts(700, 200, 700 * 10000 * 200) == 2
    assert linalg.mkl_parts(2048, 1024, 2048 * 256 * 1024) == 8
    assert linalg.mkl_parts(768, 128, 768 * 128 * 512) == 2
    assert linalg.mkl_parts(64, 64, 64 * 2304 * 64) == 2


_SPLIT_BATCH = """
    import numpy as np, jitorch as jt
    from jitorch.runtime import blas_calls
    from tests.blas_reference import chosen_matmul
    rng = np.random.default_rng(47)
    a = rng.standard_normal((2, 128, 2048)).astype(np.float32)
    b = rng.standard_normal((2, 2048, 64)).astype(np.float32)
    got = {}
    for n in (1, 2, 4):
        jt.set_num_threads(n)
        got[n] = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy().tobytes()
    print(got[1] == got[2] == got[4] == chosen_matmul(a, b).tobytes() == np.matmul(a, b).tobytes(),
          blas_calls.counters["gemm calls"] == 2)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_batch_split_by_matrix_at_two_threads_keeps_its_one_thread_bits(library):
    """A batch of two 128x2048 @ 2048x64 matrices: at one thread NumPy's matmul (OpenBLAS, looping over the
    batch); at two it splits by matrix into two gemm calls on the team, which under MKL called MKL's gemm (their
    multiply-adds, the whole batch's, were over MKL_MIN_WORK) and rounded otherwise (seed 47; main at ce65b4d).
    A batch of several matrices is OpenBLAS's, its parts too."""
    assert _run(_SPLIT_BATCH, library) == "True True"


_RULE_SHAPES = """
    import numpy as np, torch, jitorch as jt
    from jitorch.runtime import blas_calls, blas_library
    from tests.blas_reference import chosen_matmul
    rng = np.random.default_rng(470)
    mkl = blas_library.chosen() == blas_library.MKL
    worst, results = 0.0, []
    # (m, k, n, a transposed, b transposed, whether the rule gives MKL its gemm where MKL is chosen)
    for m, k, n, ta, tb, rule in ((1024, 4096, 128, True, False, False), (1024, 4096, 128, False, False, True),
                                  (2048, 2048, 64, True, False, False), (1024, 4096, 160, True, False, True),
                                  (128, 1024, 4096, False, False, False), (128, 1024, 4096, False, True, True)):
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        a = a.T if ta else a
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        b = b.T if tb else b
        bits = set()
        for threads in (1, 2):
            jt.set_num_threads(threads)
            before = blas_calls.counters["part calls"]
            got = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
            bits.add(got.tobytes())
            # (MKL's products run in fixed parts; OpenBLAS's split by the thread count, parts of the whole's library)
            results.append((blas_calls.counters["part calls"] > before) == (rule and mkl))
        results.append(bits == {chosen_matmul(a, b).tobytes()})
        results.append(rule or got.tobytes() == np.matmul(a, b).tobytes())
        want = a.astype(np.float64) @ b.astype(np.float64)
        tw = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()
        scale = np.finfo(np.float32).eps * np.sqrt(k) * np.abs(want).max()
        worst = max(worst, float(np.abs(got - want).max() / scale), float(np.abs(tw - want).max() / scale))
    print(all(results), worst < 1)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_shapes_the_rule_gives_openblas_keep_its_bits_whole_and_in_parts(library):
    """Under MKL, 1024x4096x128 and 2048x2048x64 float32 with ``a`` transposed are OpenBLAS's: NumPy's bits at one
    thread, and at two, where they split in two row parts by the thread count (each part, 512 or 1024 rows, under
    the rule's 4M elements: the whole product's library decides), and so is 128x1024x4096 with ``b`` in rows (split
    by columns: parts of 2048); the same shapes with ``a`` in rows, 160 columns, or ``b`` transposed, are MKL's
    fixed parts. Under OpenBLAS all are NumPy's. torch's and jitorch's within float rounding of
    the float64 product."""
    assert _run(_RULE_SHAPES, library) == "True True"


_COMPILED = """
    import numpy as np, jitorch as jt
    from tests.blas_reference import chosen_matmul
    rng = np.random.default_rng(471)
    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    w = rng.standard_normal((4096, 128)).astype(np.float32)
    y = rng.standard_normal((4096, 256)).astype(np.float32)

    def f(x, w, y):
        return x.t() @ w, x.t() @ y  # (the gradient of a linear layer's weight: a transposed, 128 and 256 columns)
    compiled = jt.compile(f)
    want = [chosen_matmul(x.T, w).tobytes(), chosen_matmul(x.T, y).tobytes()]
    ok = True
    for n in (1, 2):
        jt.set_num_threads(n)
        args = [jt.from_numpy(v) for v in (x, w, y)]
        for fn in (f, compiled):
            ok &= [r.numpy().tobytes() for r in fn(*args)] == want
    print(ok)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_compiled_products_follow_the_shape_rule_as_eager_at_one_and_two_threads(library):
    """Two independent products of one transposed ``a`` (which a compiled call may run at once, `jit.interop`), one
    in the class the rule gives OpenBLAS (128 columns), one MKL's (256): eager and compiled, at one and two threads,
    each the chosen path's bits."""
    assert _run(_COMPILED, library) == "True"
