"""Which BLAS runs the float products (`runtime.blas_library`): MKL where its wheel is installed on an Intel CPU,
else NumPy's OpenBLAS; ``JITORCH_BLAS`` forces one. Each case that depends on the library runs in subprocesses
under both (MKL's only where it is installed), so the suite checks both paths whichever this process chose."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import blas_calls, blas_library, threads
from tests.blas_reference import chosen_matmul

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MKL_INSTALLED = next(blas_library._mkl_candidates(), None) is not None
LIBRARIES = [pytest.param("mkl", marks=pytest.mark.skipif(not MKL_INSTALLED, reason="no mkl wheel installed")),
             "openblas"]


def _run(code, library=None, timeout=300):
    """Run ``code`` in a new interpreter with ``JITORCH_BLAS=library`` (unset where None); its stdout's last line."""
    env = {k: v for k, v in os.environ.items() if k != blas_library.ENV}
    if library is not None:
        env[blas_library.ENV] = library
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_import_does_not_load_mkl():
    assert _run("""
        import jitorch, jitorch.backends.mkl
        with open("/proc/self/maps") as f:
            print(any("libmkl" in line for line in f))
    """) == "False"


def test_the_default_is_mkl_where_installed_on_an_intel_cpu_and_the_variable_forces_either():
    default = _run("import jitorch; print(jitorch.backends.mkl.is_available())")
    assert default == str(MKL_INSTALLED and blas_library.intel_cpu())
    assert _run("import jitorch; print(jitorch.backends.mkl.is_available())", "openblas") == "False"
    forced = "import jitorch; print(jitorch.backends.mkl.is_available(), jitorch.runtime.blas_library.chosen())"
    if MKL_INSTALLED:
        assert _run(forced, "MKL") == "True mkl"


def test_openblas_chosen_never_loads_mkl():
    assert _run("""
        import numpy as np, jitorch as jt
        x = jt.randn(512, 512)
        (x @ x.t()).sum().item(); (x @ x).sum().item()
        with open("/proc/self/maps") as f:
            print(any("libmkl" in line for line in f))
    """, "openblas") == "False"


def test_a_bad_variable_is_refused_at_the_first_product(monkeypatch):
    monkeypatch.setenv(blas_library.ENV, "atlas")
    monkeypatch.setattr(blas_library, "chosen", blas_library.chosen.__wrapped__)
    with pytest.raises(ValueError, match="JITORCH_BLAS='atlas': expected 'mkl' or 'openblas'"):
        blas_library.chosen()


def test_mkl_forced_where_it_does_not_load_raises(monkeypatch):
    monkeypatch.setenv(blas_library.ENV, "mkl")
    monkeypatch.setattr(blas_library, "chosen", blas_library.chosen.__wrapped__)
    monkeypatch.setattr(blas_library, "mkl_library", lambda: None)
    with pytest.raises(RuntimeError, match="JITORCH_BLAS=mkl, but no MKL library loads"):
        blas_library.chosen()


@pytest.mark.skipif(not MKL_INSTALLED, reason="no mkl wheel installed")
def test_mkl_starts_no_threads_and_loads_no_openmp():
    """MKL's SEQUENTIAL layer: a process's thread count after large products at one and two jitorch threads is
    the team's (the same as under OpenBLAS), and neither intel-openmp nor TBB is mapped."""
    code = """
        import os, jitorch as jt
        from jitorch.runtime import blas_calls
        x = jt.randn(1024, 1024)
        for n in (1, 2):
            jt.set_num_threads(n)
            (x @ x[:, :1000]).sum().item()
        with open("/proc/self/maps") as f:
            maps = f.read()
        print(len(os.listdir("/proc/self/task")), "iomp5" in maps or "libtbb" in maps, "libmkl_rt" in maps,
              blas_calls.counters["direct calls"] + blas_calls.counters["part calls"] > 0)
    """
    mkl, openblas = _run(code, "mkl").split(), _run(code, "openblas").split()
    assert mkl[1:] == ["False", "True", "True"] and openblas[1:3] == ["False", "False"]
    assert mkl[0] == openblas[0]


_PRODUCTS = """
    import numpy as np, torch, jitorch as jt
    from jitorch.runtime import blas_calls
    from tests.blas_reference import chosen_matmul
    rng = np.random.default_rng(46)
    worst = 0.0
    for dtype in (np.float32, np.float64):
        for m, k, n in ((768, 128, 384), (128, 768, 512), (300, 257, 129), (64, 1024, 256), (6, 700, 1000),
                        (200, 100, 150)):
            for transposed in (False, True):
                a = rng.standard_normal((m, k)).astype(dtype)
                b = rng.standard_normal((n, k) if transposed else (k, n)).astype(dtype)
                b = b.T if transposed else b
                for threads in (1, 2):
                    jt.set_num_threads(threads)
                    got = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
                    assert got.tobytes() == chosen_matmul(a, b).tobytes(), (m, k, n, transposed, threads)
                want = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()
                eps = np.finfo(dtype).eps
                worst = max(worst, float(np.abs(got - want).max() / (eps * np.sqrt(k) * np.abs(want).max())))
    print(blas_calls.counters["direct calls"] > 0,
          blas_calls.counters["gemm calls"] + blas_calls.counters["part calls"] > 0, worst < 1)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_products_are_the_chosen_librarys_at_any_thread_count_and_torchs_to_rounding(library):
    """Products of both dtypes and operand layouts, at one and two threads (whole, and split on the team): the
    bits of the chosen library's gemm (MKL's called through its LP64 entry, in the same parts at any thread
    count; or NumPy's), and within float rounding of torch's product computed in float64."""
    direct, team, close = _run(_PRODUCTS, library).split()
    assert close == "True" and team == "True"
    assert direct == str(library == "mkl")  # (OpenBLAS's whole products are NumPy's own matmul calls)


_STEPS = """
    import numpy as np, jitorch as jt
    import jitorch.nn as nn, jitorch.nn.functional as F
    from jitorch.runtime import blas_calls, blas_library

    def check(model, batch, loss_of):
        def step(x, y):
            loss = loss_of(model(x, y) if model is gpt else model(x), y)
            loss.backward()
            return loss
        compiled = jt.compile(step)
        x, y = batch()
        runs = {}
        for name, fn in (("eager", step), ("compiled", compiled)):
            for threads in (1, 2):
                jt.set_num_threads(threads)
                model.zero_grad()
                loss = fn(x, y).detach().numpy()
                runs[name, threads] = [loss] + [p.grad.numpy().copy() for p in model.parameters()]
        bits = {key: [a.tobytes() for a in arrays] for key, arrays in runs.items()}
        assert bits["eager", 1] == bits["eager", 2] and bits["compiled", 1] == bits["compiled", 2]
        if blas_library.chosen() != "mkl" or blas_library.intel_cpu():
            assert bits["eager", 1][0] == bits["compiled", 1][0]  # (the loss)
        else:  # (see the test's doc)
            assert abs(runs["eager", 1][0] - runs["compiled", 1][0]) <= np.spacing(runs["eager", 1][0])
        for e, c in zip(runs["eager", 1], runs["compiled", 1]):  # (see the test's doc)
            np.testing.assert_allclose(c, e, rtol=1e-4, atol=1e-6)

    jt.manual_seed(0)
    from tests.support import load_script
    gpt = load_script("examples/programs/gpt.py", "gpt46").GPT(65, 64, 2, 4, 128, dropout=0.0)  # (gpt-4x128's size)
    check(gpt, lambda: (jt.randint(0, 65, (12, 64)), jt.randint(0, 65, (12, 64))), lambda out, y: out[1])
    conv = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(64 * 24 * 24, 10))
    check(conv, lambda: (jt.randn(8, 3, 24, 24), jt.randint(0, 10, (8,))), F.cross_entropy)
    print(sum(blas_calls.counters[k] for k in ("gemm calls", "part calls", "direct calls")) > 0)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_training_steps_keep_their_bits_at_any_thread_count_and_compiled_equal_eager(library):
    """A GPT step (examples/programs/gpt.py: two layers of 128 dims, 768 tokens: MKL's split products) and a
    convolution step, eager and compiled, at one and two threads: each bit for bit the same at both thread counts,
    and the compiled loss eager's bit for bit. The compiled gradients differ from eager's in the last bits under
    either library (main at e0b8665 too: the GPT's embeddings' and first layer's, the convolutions'), so they are
    checked to float rounding here. MKL forced on an AMD CPU (znver4, session 48; OpenBLAS is the default there)
    gives the convolution step's compiled loss 1 ulp from eager's (2.3084867 vs 2.3084865): checked to an ulp."""
    assert _run(_STEPS, library, timeout=900) == "True"


_FORK = """
    import os, numpy as np, jitorch as jt
    from tests.blas_reference import chosen_matmul
    a, b = np.random.default_rng(1).standard_normal((2, 512, 512)).astype(np.float32)
    parent = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        jt.set_num_threads(2)
        child = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
        os.write(write, bytes([child.tobytes() == parent.tobytes() == chosen_matmul(a, b).tobytes()]))
        os._exit(0)
    ok = os.read(read, 1) == bytes([1])
    os.waitpid(pid, 0)
    print(ok)
"""


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_forked_child_computes_the_parents_products(library):
    """A child forked after the parent's first product (MKL loaded) computes products with the same bits, whole
    and split on its own team."""
    assert _run(_FORK, library) == "True"


@pytest.mark.skipif(not MKL_INSTALLED, reason="no mkl wheel installed")
@pytest.mark.parametrize("torch_first", [True, False])
def test_mkl_coexists_with_torchs_own_mkl(torch_first):
    """torch links its own MKL and OpenMP: imported before jitorch's first product or after it, jitorch's products
    keep MKL's bits and torch's its own values (within rounding of float64)."""
    code = f"""
        import numpy as np
        {'import torch' if torch_first else ''}
        import jitorch as jt
        from tests.blas_reference import chosen_matmul
        a, b = np.random.default_rng(2).standard_normal((2, 640, 640)).astype(np.float32)
        first = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
        import torch
        t = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()
        second = (jt.from_numpy(a) @ jt.from_numpy(b)).numpy()
        exact = (a.astype(np.float64) @ b.astype(np.float64))
        print(first.tobytes() == second.tobytes() == chosen_matmul(a, b).tobytes(), np.abs(t - exact).max() < 1e-3,
              jt.backends.mkl.is_available())
    """
    assert _run(code, "mkl") == "True True True"


def test_small_products_stay_numpys_and_large_ones_are_the_chosen_gemm(monkeypatch):
    """Below `MKL_MIN_WORK` multiply-adds a product is NumPy's matmul (no direct call); at it, a direct call of
    the chosen gemm where that is MKL; a batch of several matrices stays NumPy's."""
    monkeypatch.setitem(threads._settings, "threads", 1)
    rng = np.random.default_rng(3)
    mkl = blas_library.chosen() == blas_library.MKL
    for shape, batch, expected in (((64, 64, 64), (), 0), ((128, 128, 128), (), int(mkl)),
                                   ((128, 128, 128), (4,), 0), ((128, 128, 128), (1,), int(mkl))):
        m, k, n = shape
        a = rng.standard_normal(batch + (m, k)).astype(np.float32)
        b = rng.standard_normal(batch + (k, n)).astype(np.float32)
        before = blas_calls.counters["direct calls"]
        got = jt.matmul(jt.from_numpy(a), jt.from_numpy(b)).numpy()
        assert blas_calls.counters["direct calls"] - before == expected, (shape, batch)
        assert got.tobytes() == chosen_matmul(a, b).tobytes()


@pytest.mark.skipif(not MKL_INSTALLED, reason="no mkl wheel installed")
def test_mkl_is_found_in_the_environments_lib_folder_first_and_else_through_the_wheels_file_list(monkeypatch,
                                                                                                 tmp_path):
    """The lib folder is looked in first (reading the wheel's file list cost 20 ms, half of MKL's load); an
    installation elsewhere (``--target``, ``--user``) is found through that list."""
    first = next(blas_library._mkl_candidates())
    assert os.path.dirname(first) == os.path.join(sys.prefix, "lib")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    found = list(blas_library._mkl_candidates())
    assert found and all(os.path.basename(p).startswith("libmkl_rt.") for p in found)
    assert os.path.realpath(found[0]) == os.path.realpath(first)
