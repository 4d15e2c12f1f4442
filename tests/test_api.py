"""Namespace functions that are not registry ops (jitorch/api.py): tensor queries, layouts, inference mode,
against torch."""

import pickle

import numpy as np
import pytest
import torch

import jitorch as jt

QUERIES = ["is_complex", "is_floating_point", "is_signed", "is_nonzero", "is_conj", "is_neg", "is_inference"]


@pytest.mark.parametrize("name", QUERIES)
@pytest.mark.parametrize("values, dtype", [([1.5], "float32"), ([0], "int64"), ([1], "uint8"), ([False], "bool")])
def test_namespace_queries_answer_as_torch(name, values, dtype):
    x, t = jt.tensor(values, dtype=getattr(jt, dtype)), torch.tensor(values, dtype=getattr(torch, dtype))
    assert getattr(jt, name)(x) == getattr(torch, name)(t) == getattr(x, name)()


@pytest.mark.parametrize("values, message", [([1.0, 2.0], "more than one value"), ([], "no values")])
def test_is_nonzero_refuses_other_than_one_element(values, message):
    with pytest.raises(RuntimeError, match=f"Boolean value of Tensor with {message} is ambiguous"):
        jt.is_nonzero(jt.tensor(values))
    with pytest.raises(RuntimeError, match=f"Boolean value of Tensor with {message} is ambiguous"):
        torch.is_nonzero(torch.tensor(values))


@pytest.mark.parametrize("name", QUERIES)
def test_namespace_queries_refuse_a_non_tensor_as_torch(name):
    with pytest.raises(TypeError) as theirs:
        getattr(torch, name)(3)
    with pytest.raises(TypeError) as ours:
        getattr(jt, name)(3)
    assert str(ours.value) == str(theirs.value)


def test_is_same_size():
    assert jt.is_same_size(jt.ones(2, 3), jt.zeros(2, 3)) and not jt.is_same_size(jt.ones(2, 3), jt.ones(3, 2))


def test_inference_tensors_are_those_allocated_in_inference_mode():
    x, t = jt.ones(2), torch.ones(2)
    answers = []
    for lib, base in ((jt, x), (torch, t)):
        with lib.inference_mode():
            made, view, result = lib.ones(2), base[:1], base + 1
            with lib.inference_mode(False):
                inner = (lib.is_inference_mode_enabled(), lib.ones(1).is_inference())
            during = lib.is_inference_mode_enabled()
        answers.append((during, made.is_inference(), view.is_inference(), result.is_inference(), inner,
                        made[:1].is_inference(), lib.is_inference_mode_enabled(), lib.is_grad_enabled()))
    assert answers[0] == answers[1]
    assert answers[0][:4] == (True, True, False, True)


def test_inference_mode_as_a_decorator_sets_the_flag():
    @jt.inference_mode()
    def inside():
        return jt.is_inference_mode_enabled(), jt.zeros(1).is_inference()
    assert inside() == (True, True) and not jt.is_inference_mode_enabled()


def test_layout_is_a_strided_object_printed_as_torch_prints_its_own():
    x = jt.ones(2)
    assert x.layout is jt.strided and isinstance(jt.strided, jt.layout)
    assert repr(x.layout) == repr(torch.ones(2).layout).replace("torch", "jitorch")
    assert pickle.loads(pickle.dumps(jt.strided)) is jt.strided


CASTS = ["float", "double", "half", "bfloat16", "int", "long", "short", "char", "byte", "bool"]


@pytest.mark.parametrize("name", CASTS)
def test_cast_methods_take_memory_format_as_torch(name):
    x, t = jt.ones(3, 2).t(), torch.ones(3, 2).t()
    for fmt in ("preserve_format", "contiguous_format"):
        ours, theirs = getattr(x, name)(memory_format=getattr(jt, fmt)), getattr(t, name)(
            memory_format=getattr(torch, fmt))
        assert ours.stride() == theirs.stride() and str(ours.dtype)[8:] == str(theirs.dtype)[6:]
        assert (ours is x) == (theirs is t)


def test_cast_methods_refuse_a_memory_format_of_another_type():
    with pytest.raises(TypeError, match="float\\(\\): argument 'memory_format' must be jitorch.memory_format, "
                                        "not int"):
        jt.ones(2).float(memory_format=3)


def test_set_num_threads_governs_compiled_kernels_threads(monkeypatch):
    from jitorch.codegen import cpu
    from jitorch.runtime import threads
    monkeypatch.setitem(threads._settings, "threads", None)
    monkeypatch.setenv("JITORCH_NUM_THREADS", "3")
    assert jt.get_num_threads() == cpu.num_threads() == 3
    jt.set_num_threads(1)
    assert jt.get_num_threads() == cpu.num_threads() == 1
    jt.set_num_threads(3)
    for name in ("set_num_threads", "set_num_interop_threads"):
        with pytest.raises(RuntimeError, match=f"{name} expects a positive integer"):
            getattr(jt, name)(0)
        with pytest.raises(RuntimeError, match=f"{name} expects a positive integer"):
            getattr(torch, name)(0)


def test_set_num_threads_gives_numpys_blas_one_thread(monkeypatch):
    from threadpoolctl import threadpool_info
    from jitorch.runtime import threads
    monkeypatch.setitem(threads._settings, "threads", None)
    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas, "NumPy's BLAS library should be visible to threadpoolctl"
    before = blas[0]["num_threads"]
    try:
        for n in (1, 2):  # BLAS keeps one thread: jitorch splits large products on its own pool
            jt.set_num_threads(n)
            assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {1}
        a = np.ones((64, 64), np.float32)
        assert np.array_equal((jt.from_numpy(a) @ jt.from_numpy(a)).numpy(), a @ a)
    finally:
        jt.set_num_threads(before)


def test_interop_threads_are_set_once(monkeypatch):
    from jitorch.runtime import threads
    monkeypatch.setitem(threads._settings, "interop", None)
    monkeypatch.setitem(threads._settings, "interop_fixed", False)
    assert jt.get_num_interop_threads() >= 1
    jt.set_num_interop_threads(2)
    assert jt.get_num_interop_threads() == 2
    with pytest.raises(RuntimeError, match="cannot set number of interop threads"):
        jt.set_num_interop_threads(3)
    jt.init_num_threads()


def test_warn_always_repeats_the_recompile_limit_warning(monkeypatch):
    from jitorch.jit.compile import config
    from jitorch.runtime import threads
    monkeypatch.setattr(config, "recompile_limit", 1)
    monkeypatch.setitem(threads._settings, "warn_always", False)
    f = jt.compile(lambda a: a + 1)
    f(jt.ones(1))
    with pytest.warns(UserWarning, match="retraced"):
        f(jt.ones(2, 2))
    jt.set_warn_always(True)
    assert jt.is_warn_always_enabled()
    with pytest.warns(UserWarning, match="retraced"):
        f(jt.ones(3, 3, 3))


@pytest.fixture
def default_device_restored():
    yield
    jt.set_default_device(None)


def test_factories_honour_the_default_device_as_torch(default_device_restored):
    factories = [lambda lib: lib.ones(2), lambda lib: lib.tensor([1.0]), lambda lib: lib.arange(3),
                 lambda lib: lib.rand(2), lambda lib: lib.linspace(0, 1, 3), lambda lib: lib.empty_strided((2,), (1,)),
                 lambda lib: lib.ones(2, device="cpu"), lambda lib: lib.zeros_like(lib.ones(1, device="cpu"))]
    try:
        torch.set_default_device("meta")
        expected = [str(make(torch).device) for make in factories]
    finally:
        torch.set_default_device(None)
    jt.set_default_device("meta")
    assert jt.get_default_device() == jt.device("meta")
    assert [str(make(jt).device) for make in factories] == expected
    jt.set_default_device(None)
    assert jt.get_default_device() == jt.device("cpu") and jt.ones(1).device == jt.device("cpu")


def test_the_default_device_on_emulated_cuda_runs_factories_there(default_device_restored):
    with jt.cuda.emulated():
        jt.set_default_device("cuda")
        made = [jt.randn(2), jt.full((2,), 3.0), jt.eye(2), jt.tensor([1.0]), jt.ones(2) + 1]
        assert all(t.device == jt.device("cuda:0") for t in made) and made[1].cpu().tolist() == [3.0, 3.0]


def test_a_compiled_function_retraces_when_the_default_device_changes(default_device_restored):
    f = jt.compile(lambda a: a * 2 + jt.ones(2))
    x = jt.ones(2, device="cpu")
    assert f(x).tolist() == [3.0, 3.0]
    jt.set_default_device("meta")
    with pytest.raises(RuntimeError, match="found at least two devices, cpu and meta"):
        f(x)  # as eager: the factory inside now makes a meta tensor
    assert "default device changed from cpu to meta" in f.retrace_reason
