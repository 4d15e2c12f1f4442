"""torch.func's differentiating transforms (jvp, vjp, linearize, jacrev, jacfwd, hessian, grad) against torch
and against finite differences; per-sample gradients of a small MLP; composition with jitorch.compile."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TFn

import jitorch as jt
import jitorch.func as jf
import jitorch.nn.functional as JFn
from jitorch.func import batching

RNG = np.random.default_rng(1490)
A = RNG.standard_normal((2, 3))
V = RNG.standard_normal(3)
W = RNG.standard_normal((4, 3))


def _close(a, b, tol=1e-9):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for p, q in zip(a, b):
            _close(p, q, tol)
        return
    a, b = a.detach().numpy(), b.detach().numpy()
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _both(name):
    """The function ``name`` written once for either library ``m`` (jitorch or torch)."""
    def f(m, F):
        return {
            "pointwise": lambda x: m.sin(x) * x.exp() + x ** 3,
            "reductions": lambda x: (x.sum(-1, keepdim=True) * x).mean(0) + x.amax(),
            "matmul_views": lambda x: (x.t() @ x)[1:].reshape(-1) * x[0, 1],
            "softmax": lambda x: F.softmax(x * 2, -1),
            "layer_norm": lambda x: F.layer_norm(x, (3,)),
            "linear": lambda x: F.linear(x, m.tensor(W)).tanh(),
            "cross_entropy": lambda x: F.cross_entropy(x, m.tensor([2, 0])).reshape(1),
        }[name]
    return f(jt, JFn), f(torch, TFn)


NAMES = ["pointwise", "reductions", "matmul_views", "softmax", "layer_norm", "linear", "cross_entropy"]


@pytest.mark.parametrize("name", NAMES)
def test_jvp_jacfwd_jacrev_match_torch(name):
    jfn, tfn = _both(name)
    x, t = jt.tensor(A), jt.tensor(RNG.standard_normal(A.shape))
    X, T = torch.tensor(A), torch.tensor(t.numpy())
    _close(jf.jvp(jfn, (x,), (t,)), torch.func.jvp(tfn, (X,), (T,)))
    _close(jf.jacfwd(jfn)(x), torch.func.jacfwd(tfn)(X))
    _close(jf.jacrev(jfn)(x), torch.func.jacrev(tfn)(X))


@pytest.mark.parametrize("name", ["pointwise", "matmul_views", "softmax"])
def test_jvp_against_finite_differences(name):
    jfn, _ = _both(name)
    x, t = jt.tensor(A), jt.tensor(RNG.standard_normal(A.shape))
    eps = 1e-6
    numeric = (jfn(x + eps * t) - jfn(x - eps * t)) / (2 * eps)
    _close(jf.jvp(jfn, (x,), (t,))[1], numeric, 1e-6)
    jac = jf.jacfwd(jfn)(x)
    _close((jac.reshape(-1, 6) @ t.reshape(6)).reshape(numeric.shape), numeric, 1e-6)


def test_hessian_forward_over_reverse_and_nestings():
    jfn = lambda x: (jt.sin(x) * x.sum()).sum() + jt.exp(x) @ x  # noqa: E731
    tfn = lambda x: (torch.sin(x) * x.sum()).sum() + torch.exp(x) @ x  # noqa: E731
    x, X = jt.tensor(V), torch.tensor(V)
    want = torch.func.hessian(tfn)(X)
    _close(jf.hessian(jfn)(x), want)
    _close(jf.jacrev(jf.jacrev(jfn))(x), want)
    _close(jf.jacfwd(jf.jacfwd(jfn))(x), want)
    _close(jf.jacfwd(jf.grad(jfn))(x), want)
    _close(jf.grad(lambda y: jf.grad(jfn)(y).sum())(x), torch.func.grad(lambda y: torch.func.grad(tfn)(y).sum())(X))


def test_argnums_tuples_and_multiple_outputs():
    jfn = lambda a, b: (a * b.sum(), (a @ b).exp())  # noqa: E731
    tfn = lambda a, b: (a * b.sum(), (a @ b).exp())  # noqa: E731
    a, b = RNG.standard_normal(3), RNG.standard_normal((3, 2))
    for transform, ttransform in [(jf.jacrev, torch.func.jacrev), (jf.jacfwd, torch.func.jacfwd)]:
        _close(transform(jfn, argnums=(0, 1))(jt.tensor(a), jt.tensor(b)),
               ttransform(tfn, argnums=(0, 1))(torch.tensor(a), torch.tensor(b)))


def test_vjp_and_linearize():
    jfn, tfn = _both("matmul_views")
    x, X = jt.tensor(A), torch.tensor(A)
    out, fn = jf.vjp(jfn, x)
    tout, tfn_ = torch.func.vjp(tfn, X)
    ct = RNG.standard_normal(tuple(out.shape))
    _close(out, tout)
    _close(fn(jt.tensor(ct)), tfn_(torch.tensor(ct)))
    _close(fn(jt.tensor(2 * ct)), tfn_(torch.tensor(2 * ct)))  # (called again)
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents"):
        fn((jt.tensor(ct),))
    lout, lfn = jf.linearize(jfn, x)
    t = RNG.standard_normal(A.shape)
    _close(lfn(jt.tensor(t)), torch.func.linearize(tfn, X)[1](torch.tensor(t)))


def test_jvp_errors_as_torch():
    with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
        jf.jvp(jt.sin, jt.ones(2), (jt.ones(2),))
    with pytest.raises(RuntimeError, match="same python structure"):
        jf.jvp(jt.sin, (jt.ones(2),), [jt.ones(2)])
    with pytest.raises(RuntimeError, match="different size than that of the original Tensor"):
        jf.jvp(jt.sin, (jt.ones(2),), (jt.ones(3),))


def _mlp(m, F):
    def loss(params, x, y):
        h = F.linear(x, params["w1"], params["b1"]).relu()
        return F.cross_entropy(F.linear(h, params["w2"], params["b2"]), y)
    return loss


def test_per_sample_gradients_of_an_mlp():
    """vmap(grad(loss)) over a batch equals a loop of grad over the samples (and torch.func's), every op of
    the forward and backward batched."""
    shapes = {"w1": (8, 5), "b1": (8,), "w2": (3, 8), "b2": (3,)}
    params = {k: RNG.standard_normal(s) * 0.5 for k, s in shapes.items()}
    xs, ys = RNG.standard_normal((6, 5)), RNG.integers(0, 3, 6)
    jp = {k: jt.tensor(v) for k, v in params.items()}
    per_sample = jf.vmap(jf.grad(_mlp(jt, JFn)), in_dims=(None, 0, 0))
    before = batching.STATS["per_sample"].copy()
    got = per_sample(jp, jt.tensor(xs), jt.tensor(ys))
    assert set(batching.STATS["per_sample"] - before) == {"_check_values"}  # (the targets' check, per sample)
    loop = [jf.grad(_mlp(jt, JFn))(jp, jt.tensor(xs[i]), jt.tensor(ys[i:i + 1]).reshape(())) for i in range(6)]
    want = torch.func.vmap(torch.func.grad(_mlp(torch, TFn)), in_dims=(None, 0, 0))(
        {k: torch.tensor(v) for k, v in params.items()}, torch.tensor(xs), torch.tensor(ys))
    for k in shapes:
        _close(got[k], jt.stack([g[k] for g in loop]), 1e-12)
        _close(got[k], want[k])


def test_compiled_function_inside_transforms_runs_eagerly_and_vmap_compiles():
    calls = []

    @jt.compile
    def f(x):
        calls.append(1)
        return jt.sin(x) * x.sum()

    x = jt.tensor(A)
    got = jf.vmap(f)(x)  # the compiled function runs eagerly under vmap's hook (no graph of batched tensors)
    _close(got, torch.func.vmap(lambda v: torch.sin(v) * v.sum())(torch.tensor(A)))
    assert len(calls) == 1 and not f.cache
    tangent = jf.jvp(f, (x,), (jt.ones_like(x),))[1]
    _close(tangent, torch.func.jvp(lambda v: torch.sin(v) * v.sum(), (torch.tensor(A),),
                                   (torch.ones(2, 3, dtype=torch.float64),))[1])
    assert not f.cache

    @jt.compile
    def g(x):
        return jf.vmap(lambda r: jt.sin(r) * r.sum())(x)

    _close(g(x), got)
    _close(g(x), got)
    assert len(g.cache) == 1  # vmap inside a compiled function is traced into its graph


def test_gradients_through_vmap():
    """grad of a function that calls vmap, backward() through vmap's outputs, and jacrev by chunks of rows
    differentiate through the physical ops (torch.func's values)."""
    w, xs = RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4))
    f = lambda w, x: (w @ x).tanh().sum()  # noqa: E731
    want = torch.func.grad(lambda v: torch.func.vmap(f, (None, 0))(v, torch.tensor(xs)).sum())(torch.tensor(w))
    _close(jf.grad(lambda v: jf.vmap(f, (None, 0))(v, jt.tensor(xs)).sum())(jt.tensor(w)), want)
    leaf = jt.tensor(w, requires_grad=True)
    jf.vmap(f, (None, 0))(leaf, jt.tensor(xs)).sum().backward()
    _close(leaf.grad, want)
    _close(jf.jacrev(lambda v: jf.vmap(f, (None, 0))(v, jt.tensor(xs)), chunk_size=2)(jt.tensor(w)),
           torch.func.jacrev(lambda v: torch.func.vmap(f, (None, 0))(v, torch.tensor(xs)))(torch.tensor(w)))


def test_grad_keeps_the_history_of_inputs_that_require_grad():
    """As torch.func's: a gradient w.r.t. a tensor that requires grad outside is differentiable in it (the
    eager grad(grad(f)) of plain autograd), one w.r.t. a plain tensor is plain."""
    for m, transform in ((jt, jf), (torch, torch.func)):
        w = m.tensor(V, requires_grad=True)
        g = transform.grad(lambda v: (v ** 3).sum())(w)
        assert g.requires_grad and not transform.grad(lambda v: (v ** 3).sum())(m.tensor(V)).requires_grad
        (second,) = (jt.autograd if m is jt else torch.autograd).grad(g.sum(), w)
        _close(second, torch.tensor(6 * V))
