"""jitorch.backends' switches against torch.backends', and deterministic algorithms on the fake CUDA device."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend


@pytest.fixture(autouse=True)
def restore():
    """Leave every switch as torch and jitorch start with."""
    yield
    for lib in (torch, jt):
        lib.set_float32_matmul_precision("highest")
        lib.use_deterministic_algorithms(False)
        lib.backends.cudnn.benchmark = False
        lib.backends.cudnn.deterministic = False
        lib.backends.cudnn.allow_tf32 = True
        lib.backends.cudnn.enabled = True


def test_defaults_are_torchs():
    for expr in ("backends.cuda.matmul.allow_tf32", "backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
                 "backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "backends.cudnn.enabled",
                 "backends.cudnn.benchmark", "backends.cudnn.deterministic", "backends.cudnn.allow_tf32",
                 "backends.cudnn.benchmark_limit", "backends.mps.is_available()", "backends.mps.is_built()",
                 "backends.cudnn.version()", "get_float32_matmul_precision()",
                 "are_deterministic_algorithms_enabled()", "get_deterministic_debug_mode()"):
        assert eval(expr, {"backends": jt.backends, **vars(jt)}) == eval(expr, {"backends": torch.backends,
                                                                               **vars(torch)}), expr


def test_allow_tf32_and_the_matmul_precision_move_together_as_in_torch():
    for lib in (torch, jt):
        lib.backends.cuda.matmul.allow_tf32 = True
    assert jt.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "high"
    for precision in ("medium", "highest", "high"):
        torch.set_float32_matmul_precision(precision)
        jt.set_float32_matmul_precision(precision)
        assert jt.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32


def test_matmul_results_are_ieee_float32_whatever_the_precision():
    a, b = jt.randn(64, 64), jt.randn(64, 64)
    exact = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    jt.set_float32_matmul_precision("medium")
    error = np.abs((a @ b).numpy() - exact).max()
    assert error < 1e-4  # TensorFloat-32 (10-bit mantissa) or bfloat16 would be off by about 1e-2 here


def test_an_unknown_precision_warns_and_changes_nothing():
    jt.set_float32_matmul_precision("high")
    with pytest.warns(UserWarning, match="bogus is not one of 'highest', 'high', or 'medium'"):
        jt.set_float32_matmul_precision("bogus")
    assert jt.get_float32_matmul_precision() == "high"


@pytest.mark.parametrize("target,name", [("cudnn", "benchmark"), ("cudnn", "deterministic"),
                                         ("cudnn", "enabled"), ("cudnn", "allow_tf32"),
                                         ("cuda.matmul", "allow_tf32")])
def test_flags_take_bools_only_as_torchs(target, name):
    def owner(lib):
        return eval(f"backends.{target}", {"backends": lib.backends})
    with pytest.raises(RuntimeError) as theirs:
        setattr(owner(torch), name, 1)
    with pytest.raises(RuntimeError, match=str(theirs.value)):
        setattr(owner(jt), name, 1)
    setattr(owner(jt), name, True)
    assert getattr(owner(jt), name) is True


def test_matmul_flags_refuse_unknown_names_as_torch():
    with pytest.raises(AttributeError, match="Unknown attribute allow_tf33"):
        jt.backends.cuda.matmul.allow_tf33 = True


def test_cudnn_flags_context_restores():
    jt.backends.cudnn.benchmark = True
    with jt.backends.cudnn.flags(enabled=False, deterministic=True):
        assert not jt.backends.cudnn.enabled and jt.backends.cudnn.deterministic
        assert not jt.backends.cudnn.benchmark  # torch's flags() sets every flag it takes
    assert jt.backends.cudnn.enabled and jt.backends.cudnn.benchmark and not jt.backends.cudnn.deterministic
    assert not jt.backends.cudnn.is_available()


def test_cpu_capability_names_what_the_kernels_compile_for(monkeypatch):
    assert jt.backends.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
    from jitorch.codegen import machine
    if "avx2" not in machine.host().required():
        return
    monkeypatch.setenv("JITORCH_CPU", "x86-64-v3")
    assert jt.backends.cpu.get_cpu_capability() == "AVX2"
    monkeypatch.setenv("JITORCH_CPU", "x86-64-v2")
    assert jt.backends.cpu.get_cpu_capability() == "DEFAULT"


def test_deterministic_algorithms_flags_as_torch():
    for args, kwargs in [((True,), {}), ((True,), {"warn_only": True}), ((False,), {})]:
        torch.use_deterministic_algorithms(*args, **kwargs)
        jt.use_deterministic_algorithms(*args, **kwargs)
        assert jt.are_deterministic_algorithms_enabled() == torch.are_deterministic_algorithms_enabled()
        assert (jt.is_deterministic_algorithms_warn_only_enabled()
                == torch.is_deterministic_algorithms_warn_only_enabled())
        assert jt.get_deterministic_debug_mode() == torch.get_deterministic_debug_mode()
    for mode in ("warn", 2, "default", 1, 0):
        torch.set_deterministic_debug_mode(mode)
        jt.set_deterministic_debug_mode(mode)
        assert jt.are_deterministic_algorithms_enabled() == torch.are_deterministic_algorithms_enabled()
        assert jt.get_deterministic_debug_mode() == torch.get_deterministic_debug_mode()


@pytest.mark.parametrize("call", [lambda lib: lib.use_deterministic_algorithms(1),
                                  lambda lib: lib.set_deterministic_debug_mode(5),
                                  lambda lib: lib.set_deterministic_debug_mode("loud")],
                         ids=["int_mode", "debug_mode_5", "debug_mode_name"])
def test_deterministic_algorithms_bad_arguments_as_torch(call):
    with pytest.raises((TypeError, RuntimeError)) as theirs:
        call(torch)
    with pytest.raises(theirs.type, match=str(theirs.value).split("(")[0]):
        call(jt)


def _sums(x, index, src):
    return [x.index_add(0, index, src), x.scatter_add(0, index, src),
            x.scatter_reduce(0, index, src, "mean"), x.index_put((index,), src, accumulate=True)]


def test_deterministic_algorithms_send_cudas_atomic_float_adds_to_the_host():
    rng = np.random.default_rng(0)
    index = jt.tensor(rng.integers(0, 4, 200))
    src = jt.tensor(rng.standard_normal(200).astype(np.float32))
    expected = [t.numpy() for t in _sums(jt.zeros(4), index, src)]
    for deterministic in (False, True):
        jt.use_deterministic_algorithms(deterministic)
        with use_backend(FakeBackend()) as fake:
            got = [t.cpu().numpy() for t in _sums(jt.zeros(4, device="cuda"), index.cuda(), src.cuda())]
        atomics = [k.name for k in fake.launches if "add" in k.name or "accumulate" in k.name or "reduce" in k.name]
        assert bool(atomics) != deterministic, atomics
        for a, b in zip(got, expected):
            if deterministic:
                assert np.array_equal(a, b)  # the CPU's order of additions, bit for bit
            else:
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_deterministic_algorithms_keep_integer_atomics_on_the_device():
    jt.use_deterministic_algorithms(True)
    with use_backend(FakeBackend()) as fake:
        out = jt.zeros(3, dtype=jt.int64, device="cuda").index_add(0, jt.tensor([0, 0, 2], device="cuda"),
                                                                   jt.ones(3, dtype=jt.int64, device="cuda"))
        assert out.cpu().tolist() == [2, 0, 1]
    assert any("index_add" in k.name for k in fake.launches)


def test_no_warning_under_warn_only():
    jt.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with use_backend(FakeBackend()):
            jt.zeros(3, device="cuda").index_add(0, jt.tensor([0, 0], device="cuda"), jt.ones(2, device="cuda"))
