"""The default thread policy (`runtime.threads._default`): without ``set_num_threads``, jitorch's first product (or
first split) does what ``set_num_threads(get_num_threads())`` does, NumPy's BLAS then one thread and products split
on jitorch's team, and ``import jitorch`` touches neither (BLAS's threads spin-waited against everything else on
a shared machine: the README demo's step took 55-104 ms under two busy processes against torch's 1.45)."""

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

import jitorch as jt
from jitorch.runtime import threads

ROOT = pathlib.Path(__file__).resolve().parents[2]


def blas_threads():
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def run_fresh(code, **env):
    """Run ``code`` in a new interpreter with this checkout's jitorch and ``env`` added; returns its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env), timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


# (a user's own BLAS limit before the import, 3 threads, is what the import must leave and the first product replace)
FRESH = """
    import os
    import numpy as np
    from threadpoolctl import threadpool_limits, threadpool_info
    threadpool_limits(limits=3, user_api="blas")
    def blas():
        return sorted({lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"})
    import jitorch as jt
    from jitorch.runtime import threads
    from jitorch.jit import gemm_words
    print("imported", threads._settings["split_products"])
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 128)).astype(np.float32), rng.standard_normal((128, 256)).astype(np.float32)
    x, y = jt.from_numpy(a), jt.from_numpy(b)
    small = (x[:4] * 2).sum()
    print("before", blas(), threads.counters["forks"])
    FIRST
    print("after", blas(), threads.product_parts(), threads.get_num_threads(), threads.counters["forks"] > 0)
    print("close", np.allclose(got.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3))
    print("keys", sorted({key[-1] for key in gemm_words._WORDS}))
    pid = os.fork()
    if pid == 0:  # (the child has no workers: its split makes a new team)
        ok = np.allclose((x @ y).numpy(), got.numpy(), rtol=1e-5, atol=1e-5) and threads.product_parts() == 2
        os._exit(0 if ok and threads.counters["forks"] > 0 else 1)
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.parametrize("first", ["eager", "compiled"])
def test_the_first_product_gives_blas_one_thread_and_splits_products_the_import_touches_nothing(first):
    """Eager: the product's first ``product_parts``; compiled: the call's hold and kept gemm words (`jit.gemm_words`,
    keyed by the parts: made at 2 from the first call on, never at 1 with BLAS's threads and then reused)."""
    code = {"eager": "got = x @ y",
            "compiled": "f = jt.compile(lambda p, q: p @ q)\n    got = f(x, y)\n    got = f(x, y)"}[first]
    out = run_fresh(FRESH.replace("FIRST", code), JITORCH_NUM_THREADS="2").split("\n")
    assert out[0] == "imported None"
    assert out[1] == "before [3] 0"  # (a small eager op: no product, no split)
    assert out[2] == "after [1] 2 2 True"
    assert out[3] == "close True"
    assert out[4] == ("keys [2]" if first == "compiled" else "keys []")
    assert out[5] == "child 0"


def test_a_fork_before_the_first_product_decides_in_the_child():
    out = run_fresh("""
        import os
        import numpy as np
        import jitorch as jt
        from threadpoolctl import threadpool_info
        from jitorch.runtime import threads
        x = jt.ones(512, 128)
        pid = os.fork()
        if pid == 0:
            ok = (np.array_equal((x @ x.t()).numpy(), np.full((512, 512), 128, np.float32))
                  and threads._settings["split_products"] is True and threads.counters["forks"] > 0
                  and {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {1})
            os._exit(0 if ok else 1)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), threads._settings["split_products"])
    """, JITORCH_NUM_THREADS="2")
    assert out.split() == ["0", "None"]


def test_set_num_threads_one_then_two_after_the_default(monkeypatch):
    """set_num_threads shares the default's code: BLAS one thread at 1 and 2, products whole at 1 and split at 2,
    the same values as torch's either way."""
    monkeypatch.setitem(threads._settings, "threads", None)
    monkeypatch.setenv("JITORCH_NUM_THREADS", "2")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 384)).astype(np.float32), rng.standard_normal((384, 128)).astype(np.float32)
    expected = torch.from_numpy(a) @ torch.from_numpy(b)
    assert threads.product_parts() == 2 and blas_threads() == {1}
    got = {}
    try:
        for n in (1, 2):
            jt.set_num_threads(n)
            forks = threads.counters["forks"]
            assert blas_threads() == {1} and threads.product_parts() == n
            got[n] = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
            assert threads.counters["forks"] - forks == n - 1
    finally:
        jt.set_num_threads(2)
    torch.testing.assert_close(torch.from_numpy(got[2]), expected, rtol=1e-5, atol=1e-4)
    assert got[1].tobytes() == got[2].tobytes()  # (each element the same one-thread BLAS dot product)


def test_a_dataloader_worker_computes_products_after_the_default():
    """A worker forked after the parent's first product (its own ``set_num_threads(1)``: whole products)."""
    from jitorch.utils.data import DataLoader

    class Products:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            x = jt.full((256, 256), float(i + 1))
            return (x @ x)[0, :2], threads.product_parts()

    assert threads.product_parts() == threads.get_num_threads()
    batches = list(DataLoader(Products(), batch_size=1, num_workers=1))
    assert [(b[0].tolist(), b[1].tolist()) for b in batches] == [([[256.0, 256.0]], [1]), ([[1024.0, 1024.0]], [1])]
