"""jitorch.autocast (jitorch/amp/autocast_mode.py): the region's state and API as torch 2.13 has them,
gradients through its casts, and compiled functions, which record its casts and guard on it."""

import threading
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as JF


def no_cuda():
    return pytest.mark.skipif(jt.cuda.is_available(), reason="checks the behaviour without CUDA")


def test_defaults_and_the_state_inside_a_region():
    assert (jt.get_autocast_dtype("cpu"), jt.get_autocast_dtype("cuda")) == (jt.bfloat16, jt.float16)
    assert not jt.is_autocast_enabled("cpu") and not jt.is_autocast_enabled()
    with jt.autocast("cpu", dtype=jt.float16, cache_enabled=False) as region:
        assert isinstance(region, jt.autocast)
        assert jt.is_autocast_enabled("cpu") and not jt.is_autocast_enabled()  # no argument: CUDA's, as torch's
        assert jt.get_autocast_dtype("cpu") is jt.float16 and not jt.is_autocast_cache_enabled()
        with jt.autocast("cpu", enabled=False):
            assert not jt.is_autocast_enabled("cpu")
            assert jt.mm(jt.ones(2, 2), jt.ones(2, 2)).dtype is jt.float32
        assert jt.is_autocast_enabled("cpu")
    assert not jt.is_autocast_enabled("cpu") and jt.get_autocast_dtype("cpu") is jt.bfloat16
    assert jt.is_autocast_cache_enabled()


def test_the_region_is_restored_when_its_block_raises():
    with pytest.raises(KeyError):
        with jt.autocast("cpu"):
            raise KeyError
    assert not jt.is_autocast_enabled("cpu") and jt.autocast_increment_nesting() == 1
    assert jt.autocast_decrement_nesting() == 0


def test_as_a_decorator_including_a_recursive_function():
    @jt.autocast("cpu")
    def f(x, depth):
        y = x @ x
        return f(y.float(), depth - 1) if depth else (y, jt.is_autocast_enabled("cpu"))

    y, on = f(jt.ones(2, 2), 2)
    assert on and y.dtype is jt.bfloat16 and not jt.is_autocast_enabled("cpu")
    with pytest.raises(TypeError, match=r"autocast\(\)\(func\) requires a callable, but got int"):
        jt.autocast("cpu")(3)


def test_errors_and_warnings_as_torchs():
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        jt.autocast(jt.device("cpu"))
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        jt.autocast("xyz")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        torch.autocast("xyz")
    for module in (torch, jt):
        with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
            region = module.autocast("cpu", dtype=module.float32)
        with region:
            assert not module.is_autocast_enabled("cpu")
    assert jt.amp.is_autocast_available("cpu") and not jt.amp.is_autocast_available("mps")


@no_cuda()
def test_cuda_autocast_without_cuda_warns_and_is_off():
    with pytest.warns(UserWarning, match="CUDA is not available. Disabling autocast"):
        region = jt.autocast("cuda")
    with region:
        assert not jt.is_autocast_enabled("cuda")


def test_the_deprecated_device_forms():
    with pytest.warns(FutureWarning, match=r"jitorch.cpu.amp.autocast\(args...\)` is deprecated"):
        region = jt.cpu.amp.autocast()
    with region:
        assert jt.get_autocast_dtype("cpu") is jt.bfloat16 and (jt.ones(2, 2) @ jt.ones(2, 2)).dtype is jt.bfloat16
    with jt.cuda.emulated():
        with pytest.warns(FutureWarning, match="jitorch.cuda.amp.autocast"):
            region = jt.cuda.amp.autocast(dtype=jt.bfloat16)
        with region:
            assert jt.is_autocast_enabled("cuda") and jt.get_autocast_dtype("cuda") is jt.bfloat16
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jt.get_autocast_gpu_dtype() is jt.float16 and jt.get_autocast_cpu_dtype() is jt.bfloat16
    assert [w.category for w in caught] == [DeprecationWarning] * 2


def test_the_state_is_thread_local():
    seen = []
    with jt.autocast("cpu"):
        t = threading.Thread(target=lambda: seen.append((jt.is_autocast_enabled("cpu"),
                                                         (jt.ones(2, 2) @ jt.ones(2, 2)).dtype)))
        t.start()
        t.join()
    assert seen == [(False, jt.float32)]


def mlp(module, seed_weights):
    m = module.nn.Sequential(module.nn.Linear(4, 8), module.nn.ReLU(), module.nn.Linear(8, 3))
    for p, w in zip(m.parameters(), seed_weights):
        with module.no_grad():
            p.copy_(module.tensor(w))
    return m


def weights():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in ((8, 4), (8,), (3, 8), (3,))]


def test_gradients_come_back_in_the_parameters_dtype_as_torchs():
    x, y = np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32)[0], None
    target = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    results = []
    for module in (torch, jt):
        m = mlp(module, weights())
        with module.autocast("cpu"):
            out = m(module.tensor(x))
            loss = module.nn.functional.mse_loss(out, module.tensor(target))
        loss.backward()
        results.append((out, loss, [p.grad for p in m.parameters()]))
    (t_out, t_loss, t_grads), (j_out, j_loss, j_grads) = results
    assert str(j_out.dtype) == "jitorch.bfloat16" and str(j_loss.dtype) == "jitorch.float32"
    assert str(t_out.dtype) == "torch.bfloat16" and str(t_loss.dtype) == "torch.float32"
    for tg, jg in zip(t_grads, j_grads):
        assert jg.dtype is jt.float32
        np.testing.assert_allclose(jg.numpy(), tg.numpy(), rtol=3e-2, atol=3e-2)
    assert y is None


def test_custom_fwd_and_custom_bwd():
    seen = {}

    class Square(jt.autograd.Function):
        @staticmethod
        @jt.amp.custom_fwd(device_type="cpu", cast_inputs=jt.float32)
        def forward(ctx, x):
            seen["forward"] = (x.dtype, jt.is_autocast_enabled("cpu"))
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @jt.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            seen["backward"] = jt.is_autocast_enabled("cpu")
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = jt.ones(3, dtype=jt.bfloat16, requires_grad=True)
    with jt.autocast("cpu"):
        y = Square.apply(x)
    y.sum().backward()
    assert seen == {"forward": (jt.float32, False), "backward": False}
    assert y.dtype is jt.float32 and x.grad.dtype is jt.bfloat16 and x.grad.tolist() == [2.0] * 3


class TestCompiled:
    def model(self):
        m = mlp(jt, weights())

        def f(x):
            return JF.log_softmax(m(x), 1)
        return m, f

    def test_a_trace_records_the_casts_and_matches_eager(self):
        m, f = self.model()
        x = jt.randn(5, 4)
        compiled = jt.compile(f)
        with jt.autocast("cpu"):
            want = f(x)
            got = compiled(x)
            graph = compiled.lower(x).graph
        assert got.dtype is want.dtype is jt.bfloat16
        np.testing.assert_array_equal(got.detach().float().numpy(), want.detach().float().numpy())
        casts = [n for n in graph.nodes if n.op.name == "_to_copy"]
        assert len(casts) == 5  # the input once per linear, the weights and biases: the graph's own nodes
        assert set(graph.constant_tensors.values()) <= set(m.parameters())  # no cached cast captured

    @pytest.mark.parametrize("backend", ["llvm", "interpreter"])
    def test_guards_tell_autocast_states_apart(self, backend):
        compiled = jt.compile(lambda a, b: a @ b, backend=backend)
        a = jt.randn(3, 3)
        dtypes = []
        for region in (jt.autocast("cpu", enabled=False), jt.autocast("cpu"), jt.autocast("cpu", dtype=jt.float16)):
            with region:
                dtypes.append(compiled(a, a).dtype)
        assert dtypes == [jt.float32, jt.bfloat16, jt.float16]
        assert len(compiled.cache) == 3
        assert compiled.retrace_reason == ("autocast changed from cpu jitorch.bfloat16 to cpu jitorch.float16")
        assert compiled(a, a).dtype is jt.float32 and len(compiled.cache) == 3

    @pytest.mark.parametrize("backend", ["llvm", "interpreter"])
    def test_a_region_turned_off_inside_the_function_stays_off_when_the_graph_runs(self, backend):
        """The graph runs its ops as traced: neither the interpreter nor the compiler's folding casts the
        float32 product the function computes with autocast off."""
        @jt.compile(backend=backend)
        def f(a, b):
            with jt.autocast("cpu", enabled=False):
                exact = a @ b
            return exact, a @ b

        a = jt.randn(4, 4)
        with jt.autocast("cpu"):
            f(a, a)
            exact, low = f(a, a)
        assert exact.dtype is jt.float32 and low.dtype is jt.bfloat16
        np.testing.assert_allclose(exact.numpy(), a.numpy() @ a.numpy(), rtol=1e-5, atol=1e-5)

    def test_the_compiled_backward_recomputes_under_the_forwards_autocast(self):
        """The backward, traced when ``backward()`` runs outside the region, casts as the forward did."""
        grads = []
        for compile_it in (False, True):
            m, f = self.model()
            step = jt.compile(f) if compile_it else f
            with jt.autocast("cpu"):
                loss = step(jt.ones(5, 4)).float().sum()
            loss.backward()
            grads.append([p.grad.numpy() for p in m.parameters()])
        for eager, compiled in zip(*grads):
            np.testing.assert_allclose(compiled, eager, rtol=1e-6, atol=1e-6)

    def test_a_compiled_training_step_with_an_autocast_forward_matches_eager(self):
        losses, params = [], []
        for compile_it in (False, True):
            m, f = self.model()
            opt = jt.optim.SGD(m.parameters(), lr=0.1)

            def step(x, y):
                opt.zero_grad()
                with jt.autocast("cpu"):
                    loss = JF.mse_loss(m(x), y)
                loss.backward()
                opt.step()
                return loss

            run = jt.compile(step) if compile_it else step
            x, y = jt.ones(5, 4), jt.zeros(5, 3)
            losses.append([run(x, y).item() for _ in range(3)])
            params.append([p.detach().numpy() for p in m.parameters()])
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
        for compiled, eager in zip(*params):
            np.testing.assert_allclose(compiled, eager, rtol=1e-6, atol=1e-7)
