"""jitorch.func.vmap against torch.func.vmap: batching rules (which path ran, per op), the per-sample
fallback, in_dims/out_dims, chunks, randomness, nesting, in-place ops and their errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TFn

import jitorch as jt
import jitorch.func as jf
import jitorch.nn.functional as JFn
from jitorch.func import batching, rules

RNG = np.random.default_rng(149)
X = RNG.standard_normal((4, 3, 5))
W = RNG.standard_normal((6, 5))
IMG = RNG.standard_normal((3, 2, 3, 6, 6)).astype(np.float32)
CW = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)


def _close(a, b, tol=1e-10):
    a, b = a.detach().numpy(), b.detach().numpy()
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _paths(fn, *args, **kw):
    """fn's result and the ops it ran batched and per sample."""
    before = {k: v.copy() for k, v in batching.STATS.items()}
    out = fn(*args, **kw)
    return out, {k: +(batching.STATS[k] - before[k]) for k in before}


CASES = {  # name: (jitorch function, torch function, inputs, ops that must run batched)
    "pointwise": (lambda x: jt.sin(x) * 2 + x.exp() / (1 + x * x), lambda x: torch.sin(x) * 2 + x.exp() / (1 + x * x),
                  (X,), {"sin", "mul", "exp", "add", "true_divide"}),
    "broadcast_unbatched": (lambda x, w: x[..., :1] * w[0] - x.sum(-1, keepdim=True),
                            lambda x, w: x[..., :1] * w[0] - x.sum(-1, keepdim=True), (X, W), {"mul", "sub", "sum"}),
    "reductions": (lambda x: x.sum() + x.mean(0).amax() + x.std(1).sum() + x.logsumexp(-1).sum(),
                   lambda x: x.sum() + x.mean(0).amax() + x.std(1).sum() + x.logsumexp(-1).sum(), (X,),
                   {"sum", "mean", "amax", "logsumexp"}),
    "matmul": (lambda x, w: (x @ w.t()) @ w, lambda x, w: (x @ w.t()) @ w, (X, W), {"matmul"}),
    "views": (lambda x: x.t()[1:3].reshape(-1).unsqueeze(0).expand(2, -1) * 3,
              lambda x: x.t()[1:3].reshape(-1).unsqueeze(0).expand(2, -1) * 3, (X,), {"mul"}),
    "cat_stack_softmax": (lambda x: jt.cat([x, x.softmax(-1)], 0).cumsum(1) + jt.stack([x, x], -1).sum(-1).repeat(2, 1),
                          lambda x: torch.cat([x, x.softmax(-1)], 0).cumsum(1)
                          + torch.stack([x, x], -1).sum(-1).repeat(2, 1), (X,), {"cat", "softmax", "cumsum", "stack"}),
    "linear_layer_norm": (lambda x, w: JFn.layer_norm(JFn.linear(x, w), (6,)),
                          lambda x, w: TFn.layer_norm(TFn.linear(x, w), (6,)), (X, W), {"linear", "layer_norm"}),
    "cross_entropy": (lambda x: JFn.cross_entropy(x, jt.tensor([0, 4, 2])),
                      lambda x: TFn.cross_entropy(x, torch.tensor([0, 4, 2])), (X,), {"log_softmax", "gather"}),
}


@pytest.mark.parametrize("name", CASES)
def test_vmap_matches_torch_and_batches(name):
    jfn, tfn, inputs, batched_ops = CASES[name]
    in_dims = (0,) + (None,) * (len(inputs) - 1)
    got, paths = _paths(jf.vmap(jfn, in_dims), *[jt.tensor(a) for a in inputs])
    _close(got, torch.func.vmap(tfn, in_dims)(*[torch.tensor(a) for a in inputs]))
    assert batched_ops <= set(paths["batched"]), paths
    assert not paths["per_sample"], paths  # every op of these has a rule


def test_vmap_conv2d_batches():
    got, paths = _paths(jf.vmap(lambda x: JFn.conv2d(x, jt.tensor(CW), padding=1).relu()), jt.tensor(IMG))
    want = torch.func.vmap(lambda x: TFn.conv2d(x, torch.tensor(CW), padding=1).relu())(torch.tensor(IMG))
    _close(got, want, 1e-4)
    assert not paths["per_sample"] and paths["batched"]


def test_vmap_fallback_runs_per_sample_and_equals_the_loop():
    """Ops without a rule (flip, tril: no ``dim``) run once per sample: exactly the results of calling the
    function on each sample; index_select with a batched index runs batched (as a gather)."""
    x, idx = jt.tensor(X), jt.tensor([[2, 0], [1, 1], [0, 2], [2, 2]])
    fn = lambda a, i: a.flip(0).tril().index_select(1, i) * 2  # noqa: E731
    got, paths = _paths(jf.vmap(fn), x, idx)
    loop = jt.stack([fn(x[b], idx[b]) for b in range(4)])
    assert np.array_equal(got.numpy(), loop.numpy())
    assert paths["per_sample"] == {"flip": 1, "tril": 1}
    assert paths["batched"] == {"index_select": 1, "mul": 1}
    _close(got, torch.func.vmap(fn)(torch.tensor(X), torch.tensor(idx.numpy())))


def test_vmap_rules_and_fallback_agree(monkeypatch):
    """The batched path and the per-sample path give the same values (rules off: everything per sample)."""
    jfn, _, inputs, _ = CASES["cat_stack_softmax"]
    batched, _ = _paths(jf.vmap(jfn), jt.tensor(inputs[0]))
    monkeypatch.setattr(rules, "rule_for", lambda op: None)
    looped, paths = _paths(jf.vmap(jfn), jt.tensor(inputs[0]))
    assert not paths["batched"] and paths["per_sample"]["softmax"] == 1
    _close(batched, looped, 1e-12)


def test_vmap_rule_declined_for_zero_dim_promotion():
    """A batched 0-dim float64 operand with a float32 one: promotion sees the 0-dim per sample, so the
    broadcasting rule declines (physically it would have a dimension and promote to float64)."""
    s, v = jt.tensor([1.5, 2.5], dtype=jt.float64), jt.tensor([1.0, 2.0, 3.0])
    got, paths = _paths(jf.vmap(lambda a: a * v), s)
    assert got.dtype == jt.float32 and paths["per_sample"]["mul"] == 1
    _close(got, torch.func.vmap(lambda a: a * torch.tensor([1.0, 2.0, 3.0]))(torch.tensor([1.5, 2.5],
                                                                                           dtype=torch.float64)))


def test_vmap_in_dims_out_dims_trees():
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 3))
    fn = lambda d, s: ({"a": d["p"] * s, "b": d["q"].sum()}, d["q"])  # noqa: E731
    in_dims, out_dims = ({"p": 1, "q": None}, 0), ({"a": 1, "b": 0}, None)
    got = jf.vmap(fn, in_dims, out_dims)({"p": jt.tensor(y), "q": jt.tensor(x)}, jt.tensor(x[:, 0]))
    want = torch.func.vmap(fn, in_dims, out_dims)({"p": torch.tensor(y), "q": torch.tensor(x)}, torch.tensor(x[:, 0]))
    for g, w in zip([got[0]["a"], got[0]["b"], got[1]], [want[0]["a"], want[0]["b"], want[1]]):
        _close(g, w)


def test_vmap_unbatched_output_is_expanded_and_chunks_concatenate():
    x = jt.tensor(X)
    got = jf.vmap(lambda a: (a * 2, jt.ones(2)), chunk_size=3)(x)
    want = torch.func.vmap(lambda a: (a * 2, torch.ones(2, dtype=torch.float64)), chunk_size=3)(torch.tensor(X))
    _close(got[0], want[0])
    assert list(got[1].shape) == [4, 2]


def test_vmap_errors_as_torch():
    x = jt.tensor(X)
    cases = [
        (lambda: jf.vmap(lambda a: a, in_dims=(0, 0))(x), ValueError, "in_dims is not compatible with the structure"),
        (lambda: jf.vmap(lambda a, b: a)(x, jt.ones(3)), ValueError, "got sizes [4, 3] for the mapped dimension"),
        (lambda: jf.vmap(lambda a: 1)(x), ValueError, "must only return Tensors, got type <class 'int'>"),
        (lambda: jf.vmap(lambda a, b: a, in_dims=(0, 0))(x, 2.0), ValueError, "We cannot vmap over non-Tensor"),
        (lambda: jf.vmap(lambda a: a, in_dims=3)(x), ValueError, "expected in_dim to satisfy -3 <= in_dim < 3"),
        (lambda: jf.vmap(lambda a: a.sum().item())(x), RuntimeError, "vmap: It looks like you're"),
        (lambda: jf.vmap(lambda a: jt.rand(2) + a[0, :2])(x), RuntimeError, "randomness error mode"),
        (lambda: jf.vmap(lambda a: a, randomness="sometimes")(x), RuntimeError, "Only allowed values for randomness"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind) as info:
            call()
        assert text in str(info.value)


def test_vmap_randomness_same_and_different():
    x = jt.zeros(5, 3)
    same = jf.vmap(lambda a: a + jt.rand(3), randomness="same")(x).numpy()
    different = jf.vmap(lambda a: a + jt.rand(3), randomness="different")(x).numpy()
    assert (same == same[0]).all() and len({tuple(r) for r in different}) == 5
    like = jf.vmap(lambda a: jt.rand_like(a), randomness="same")(x).numpy()
    assert (like == like[0]).all()


def test_vmap_nested():
    a, b = RNG.standard_normal(3), RNG.standard_normal(4)
    fn = lambda u, v: jt.outer(u, v).sum() * u.sum() if False else (u * v).exp()  # noqa: E731
    got, paths = _paths(jf.vmap(jf.vmap(fn, (None, 0)), (0, None)), jt.tensor(a), jt.tensor(b))
    want = torch.func.vmap(torch.func.vmap(lambda u, v: (u * v).exp(), (None, 0)), (0, None))(
        torch.tensor(a), torch.tensor(b))
    _close(got, want)
    assert paths["batched"]["mul"] == 2 and not paths["per_sample"]  # once per level


def test_vmap_inplace_writes_the_input_and_refuses_unbatched_self():
    x = jt.tensor(X.copy())
    out = jf.vmap(lambda a: a.mul_(2).add_(1))(x)
    np.testing.assert_allclose(x.numpy(), X * 2 + 1)
    np.testing.assert_allclose(out.numpy(), X * 2 + 1)
    moved = jt.tensor(X.copy())
    jf.vmap(lambda a: a.zero_(), in_dims=2)(moved)  # (a copy inside, written back after)
    assert not moved.numpy().any()
    y = jt.zeros(3, 5)
    with pytest.raises(RuntimeError, match=r"vmap: inplace arithmetic\(self, \*extra_args\) is not possible"):
        jf.vmap(lambda a: y.add_(a))(jt.tensor(X))
    assert not y.numpy().any()  # (refused before any write)


def test_torch_vmap_alias():
    assert jt.vmap is jf.vmap


OPS_UNDER_VMAP = {  # each function's ops run batched by a rule; the per-sample loop must agree
    "full_reductions": lambda x: jt.stack([x.sum(), x.mean(), x.amax(), x.amin(), x.std(), x.var(), x.nansum(),
                                           x.logsumexp((0, 1, 2))]),
    "dim_reductions": lambda x: x.sum(1) + x.mean(-1, keepdim=True).sum(1, True) + x.amax((0, 1)) + x.std(0).sum(0),
    "bool_reductions": lambda x: jt.stack([(x > 0).all(), (x > 0).any(), (x > 0).sum(dtype=jt.float64) > 3]),
    "index_reductions": lambda x: x.argmax(1) + x.argmin(-1).sum(-1, keepdim=True) + x.max(0).indices.sum(0),
    "scans_sorts": lambda x: x.cumsum(0) + x.cumprod(-1) + x.sort(1).values + x.topk(2, -1).values.sum(-1, True),
    "gather_scatter": lambda x: x.gather(2, x.argsort(2)) + x.scatter(1, x.argmax(1, keepdim=True), 0.0),
    "softmaxes": lambda x: x.softmax(0) + x.log_softmax(-1),
    "cat_stack": lambda x: jt.cat([x, -x], 1).sum(1, keepdim=True) + jt.stack([x, x * 2], 0).mean(0),
    "zero_dim": lambda x: x[0, 0, 0].sum() + x[1, 1].amax(0).mean(),
    "view_scatters": lambda x: jt.select_scatter(x, x[0] * 2, 0, 1) + jt.slice_scatter(x, x[:, :1] * 3, 1, 2, 3),
}


@pytest.mark.parametrize("name", OPS_UNDER_VMAP)
def test_vmap_rules_agree_with_the_per_sample_loop(name, monkeypatch):
    fn, x = OPS_UNDER_VMAP[name], jt.tensor(RNG.standard_normal((3, 4, 3, 5)))
    got, paths = _paths(jf.vmap(fn), x)
    assert paths["batched"] and not paths["per_sample"], paths
    loop = jt.stack([fn(x[b]) for b in range(3)])
    assert got.dtype == loop.dtype
    np.testing.assert_allclose(got.numpy(), loop.numpy(), rtol=1e-12, atol=1e-12)


def test_vmap_escaped_batched_tensor_raises():
    kept = []
    jf.vmap(lambda a: kept.append(a) or a * 1)(jt.tensor(X))
    with pytest.raises(RuntimeError, match="vmap: a batched tensor was used after the vmap that made it returned"):
        kept[0] + 1


def test_vmap_dim_rule_declines_tensors_of_other_ranks():
    """index_add's 1-D index beside 2-D samples is no broadcast with the batch dimension in front: per sample."""
    x, src = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((2, 5))
    fn = lambda m: lambda a: a.index_add(0, m.tensor([3, 1]), m.tensor(src))  # noqa: E731
    got, paths = _paths(jf.vmap(fn(jt)), jt.tensor(x))
    assert paths["per_sample"]["index_add"] == 1
    _close(got, torch.func.vmap(fn(torch))(torch.tensor(x)))
