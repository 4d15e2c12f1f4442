"""Adversarial programs against session 45's new rewrites: the sums pass (a sum of a one-hot along its dim, a sum
through a reshape), the lse pass (log-probs kept out of memory) and the recompute pass's reduction barriers.
Each program runs compiled with the pass, compiled without it (bit for bit: the passes claim the same bits),
eagerly and in torch; the tests also check whether the pass rewrote the program."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import lse, sums
from jitorch.jit import trace
from tests.ir.test_passes import assert_runs_the_same

SPECIALS = (np.nan, -0.0, np.inf, -np.inf)


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _arrays(lib, fn, arrays, grad):
    """``fn(lib, *tensors)``'s outputs as arrays, and with ``grad`` the float inputs' gradients after them."""
    make = jt.tensor if lib is jt else torch.tensor
    ins = [make(a).requires_grad_(grad and a.dtype.kind == "f") for a in arrays]
    out = _outputs(fn(*ins))
    if grad:  # (each float output weighted by its position, so that each gradient differs)
        sum(o.float().mul(i + 1).sum() for i, o in enumerate(out) if o.dtype.is_floating_point).backward()
        out += [t.grad for t in ins if t.requires_grad]
    return [t.detach().numpy().copy() for t in out]


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True) and \
        np.array_equal(np.signbit(a), np.signbit(b))


def run_both_ways(monkeypatch, fn, arrays, grad=False):
    """(outputs compiled with the lse pass, outputs compiled without it, eager's, torch's, log_softmax nodes the
    pass rewrote)."""
    rewritten = []
    real = lse.run
    monkeypatch.setattr(lse, "run", lambda graph: rewritten.append(real(graph)) or rewritten[-1])
    new = _arrays(jt, jt.compile(lambda *a: fn(jt, *a)), arrays, grad)
    monkeypatch.setattr(lse, "run", lambda graph: 0)
    old = _arrays(jt, jt.compile(lambda *a: fn(jt, *a)), arrays, grad)
    monkeypatch.setattr(lse, "run", real)
    eager = _arrays(jt, lambda *a: fn(jt, *a), arrays, grad)
    reference = _arrays(torch, lambda *a: fn(torch, *a), arrays, grad)
    return new, old, eager, reference, sum(rewritten)


def check_lse(monkeypatch, fn, arrays, rewrites, grad=False, tol=1e-5):
    new, old, eager, reference, count = run_both_ways(monkeypatch, fn, arrays, grad)
    assert count == rewrites
    assert len(new) == len(old) == len(eager) == len(reference)
    for a, b, e, t in zip(new, old, eager, reference):
        assert _same_bits(a, b), (a, b)
        assert a.dtype == t.dtype and a.shape == t.shape
        np.testing.assert_allclose(a, t, rtol=tol, atol=tol)
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


# The sums pass: one-hot ------------------------------------------------------------------------------------

def _one_hot_sum(lib, v, q, n, dim, keepdim):
    positions = lib.arange(n).view(*([n] + [1] * (-1 - dim)))
    return lib.where(positions == q, v * 1, 0).sum(dim, keepdim=keepdim)


def _check_sum_bits(fn, tfn, arrays, rewrites):
    """The sums pass rewrites ``rewrites`` sums of the traced ``fn``; the optimised graph computes the same bits
    (the interpreter); compiled, eager and torch give the same bits."""
    ins = [jt.tensor(a) for a in arrays]
    assert sums.run(trace(fn, *ins)) == rewrites
    assert_runs_the_same(trace(fn, *ins), ins)
    compiled = _outputs(jt.compile(fn)(*ins))
    for c, e, t in zip(compiled, _outputs(fn(*ins)), _outputs(tfn(*[torch.tensor(a) for a in arrays]))):
        assert _same_bits(c.numpy(), e.numpy()) and _same_bits(c.numpy(), t.numpy()), (c, e, t)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("sign", [1, -1])
def test_one_hot_sum_with_specials_and_targets_out_of_range_keeps_the_bits(dtype, n, keepdim, sign):
    """NaN, -0.0 and inf picked (with ``sign`` -1: -NaN, +0.0, -inf), a target past the end, one negative;
    ``n`` 1 (a line of one element: sum(-0.0) is +0.0) and 0 (nothing to pick)."""
    v = np.array([[SPECIALS[0]], [SPECIALS[1]], [SPECIALS[2]], [1.5]], dtype)
    q = np.array([[0], [max(n - 1, 0)], [-1], [n]], np.int64)
    _check_sum_bits(lambda v, q: _one_hot_sum(jt, v * sign, q, n, -1, keepdim),
                    lambda v, q: _one_hot_sum(torch, v * sign, q, n, -1, keepdim), [v, q], 1)


@pytest.mark.parametrize("dims", [0, -2, [-2], (0,)])
def test_one_hot_sum_along_dim_0_with_broadcast_value_and_targets(dims):
    """The positions along dim 0, ``v`` and ``q`` broadcast along the other; a negative dim and dim lists."""
    v = np.array([[1.0, -0.0, np.nan]], np.float32)
    q = np.array([[2, -1, 7]], np.int64)

    def fn(lib, v, q):
        return lib.where(lib.arange(6).view(6, 1) == q, v * 2, 0).sum(dims)
    _check_sum_bits(lambda v, q: fn(jt, v, q), lambda v, q: fn(torch, v, q), [v, q], 1)


@pytest.mark.parametrize("case", ["v 0-d, q over more dims", "q int32, positions int8", "positions viewed",
                                  "arange(0, n, 1)", "zero written 0.0", "zero written False", "zero -0.0"])
def test_one_hot_sum_variants_the_pass_rewrites(case):
    """Spellings of the same one-hot: each is rewritten and keeps the bits (a zero of -0.0 too: every sum here,
    torch's, NumPy's and the kernels', of -0.0s alone is +0.0, as is the rewrite's ``+ 0``)."""
    rng = np.random.default_rng(45)
    v = np.float32(3.0) if case.startswith("v 0-d") else rng.standard_normal((3, 1)).astype(np.float32)
    q = rng.integers(-2, 8, (2, 3, 1) if case.startswith("v 0-d") else (2, 1, 1))

    def fn(lib, v, q):
        positions = {"q int32, positions int8": lambda: lib.arange(6, dtype=lib.int8),
                     "positions viewed": lambda: lib.arange(6).view(-1, 1).view(6),
                     "arange(0, n, 1)": lambda: lib.arange(0, 6, 1)}.get(case, lambda: lib.arange(6))()
        target = q.int() if case.startswith("q int32") else q
        zero = {"zero written 0.0": 0.0, "zero written False": False, "zero -0.0": -0.0}.get(case, 0)
        return lib.where(target == positions, v + 0, zero).sum(-1)
    _check_sum_bits(lambda v, q: fn(jt, v, q), lambda v, q: fn(torch, v, q), [v, q], 1)


@pytest.mark.parametrize("case", ["positions from 1", "positions flipped", "ne", "sum over another dim",
                                  "sum over two dims", "sum to float64", "bool targets", "float targets",
                                  "integer values, float zero", "value along the positions"])
def test_sums_that_are_not_a_one_hot_of_the_positions_are_left(case):
    """Near misses of the pattern (another range, another comparison, another dim, a promoted sum, a value that
    varies along the positions): no sum is rewritten; the values are torch's."""
    rng = np.random.default_rng(46)
    v = rng.standard_normal((3, 6) if case == "value along the positions" else (3, 1)).astype(np.float32)
    q = rng.integers(-2, 8, (2, 1, 1))

    def fn(lib, v, q):
        positions = {"positions from 1": lambda: lib.arange(1, 7),
                     "positions flipped": lambda: lib.arange(6).flip(0)}.get(case, lambda: lib.arange(6))()
        cond = (q != positions) if case == "ne" else ((q > 2) == positions) if case == "bool targets" else \
            (q.float() == positions) if case == "float targets" else (q == positions)
        value = (v * 4).long() if case == "integer values, float zero" else v + 0
        picked = lib.where(cond, value, 0.0 if case == "integer values, float zero" else 0)
        if case == "sum over another dim":
            return picked.sum(-2)
        if case == "sum over two dims":
            return picked.sum([-1, -2])
        return picked.sum(-1, dtype=lib.float64) if case == "sum to float64" else picked.sum(-1)
    ins = [jt.tensor(v), jt.tensor(q)]
    assert sums.run(trace(lambda v, q: fn(jt, v, q), *ins)) == 0
    assert_runs_the_same(trace(lambda v, q: fn(jt, v, q), *ins), ins)
    got = jt.compile(lambda v, q: fn(jt, v, q))(*ins).numpy()
    want = fn(torch, torch.tensor(v), torch.tensor(q)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_one_hot_sum_in_bfloat16():
    v = np.array([[1.0], [-0.0], [np.nan], [2.5]], np.float32)
    q = np.array([[0], [3], [-1], [9]], np.int64)

    def fn(lib, v, q):
        return _one_hot_sum(lib, v.to(lib.bfloat16), q, 5, -1, False).float()
    _check_sum_bits(lambda v, q: fn(jt, v, q), lambda v, q: fn(torch, v, q), [v, q], 1)


# The sums pass: through a reshape -------------------------------------------------------------------------

RESHAPES = [  # (source, view, reduced dims, keepdim, rewritten)
    ((700, 6), (35, 20, 6), (0, 1), False, 1), ((700, 6), (35, 20, 6), (0, 1), True, 1),
    ((700, 6), (35, 20, 6), 0, False, 0), ((6, 700), (6, 35, 20), (-1, -2), True, 1),
    ((6, 700), (6, 35, 20), (1,), False, 0), ((6, 700), (6, 35, 20), None, False, 1),
    ((4, 6), (2, 2, 2, 3), (1, 2), False, 0), ((4, 6), (2, 2, 2, 3), (0, 1), False, 1),
    ((4, 6), (2, 2, 2, 3), (2, 3), True, 1), ((4, 6), (24,), 0, False, 1), ((4, 6), (4, 1, 6), (1,), False, 0),
    ((4, 6), (4, 1, 6), (1, 2), True, 1), ((4, 1, 6), (4, 6), (1,), False, 1), ((4, 1, 6), (4, 6), (0,), True, 1),
    ((1, 24), (4, 6), (0, 1), False, 1), ((0, 6), (0, 2, 3), (1, 2), False, 1), ((0, 6), (0, 2, 3), (0,), False, 1),
    ((3, 0), (3, 0, 1), (1,), False, 1), ((2, 3, 4), (6, 4), (0,), False, 1), ((2, 3, 4), (6, 4), (1,), False, 1),
    ((2, 3, 4), (24,), (0,), True, 1), ((2, 3, 4), (2, 12), (1,), False, 1), ((2, 3, 4), (3, 2, 4), (0,), False, 0),
    ((2, 3, 4), (3, 2, 4), (0, 1), False, 1), ((6, 1), (1, 6), (1,), False, 1), ((6, 1), (1, 6), (0,), False, 0),
    ((5,), (5, 1, 1), (1, 2), False, 0), ((5,), (1, 5), (0, 1), False, 1), ((1, 1), (1,), (0,), False, 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32])
@pytest.mark.parametrize("source, view, dims, keepdim, rewritten", RESHAPES)
def test_sum_through_a_reshape_that_merges_or_splits_dims(dtype, source, view, dims, keepdim, rewritten):
    """Size-0 and size-1 dims, negative dims, every dim, reduced dims that split a group (left alone): the
    optimised graph's bits; compiled against torch (bit for bit for integers). An int32 sum is int64 (a promoted
    sum, left alone)."""
    a = (np.random.default_rng(47).standard_normal(source) * 3).astype(dtype)
    if dtype == np.float32 and a.size > 3:
        a.reshape(-1)[:3] = SPECIALS[:3]

    def fn(lib, x):
        y = (x * 2).reshape(*view)
        return y.sum() if dims is None else y.sum(dims, keepdim=keepdim)
    x = jt.tensor(a)
    assert sums.run(trace(lambda x: fn(jt, x), x)) == (0 if dtype == np.int32 else rewritten)
    assert_runs_the_same(trace(lambda x: fn(jt, x), x), [x])
    got, want = jt.compile(lambda x: fn(jt, x))(x).numpy(), fn(torch, torch.tensor(a)).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-2)
    else:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("case", ["transposed source", "transposed operand", "expanded source", "product",
                                  "product transposed", "written after"])
def test_sum_through_a_reshape_of_strided_or_written_values(case):
    """Sources that are views (no rewrite of the view's reduction), products, and a source written in place
    after the sum (the sum reads the values before the write)."""
    a = np.random.default_rng(48).standard_normal((4, 6)).astype(np.float32)

    def fn(lib, x):
        if case == "transposed source":
            return (x + 1).t().reshape(3, 2, 4).sum((0, 1))
        if case == "transposed operand":
            return (x.t() + 1).reshape(3, 2, 4).sum((0, 1))
        if case == "expanded source":
            return (x[:1] + 1).expand(4, 6).reshape(2, 2, 6).sum((0, 1))
        if case == "product":
            return (x @ x.t()).reshape(2, 2, 4).sum((0, 1))
        if case == "product transposed":
            return (x.t() @ x).t().reshape(3, 2, 6).sum((0, 1))
        y = x + 1
        s = y.view(2, 2, 6).sum((0, 1))
        y.mul_(2)
        return s, y
    x = jt.tensor(a)
    assert_runs_the_same(trace(lambda x: fn(jt, x), x), [x])
    for got, want in zip(_outputs(jt.compile(lambda x: fn(jt, x))(x)), _outputs(fn(torch, torch.tensor(a)))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


# The lse pass ------------------------------------------------------------------------------------------------

def _rows(seed=2, shape=(5, 7)):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, shape[-1], shape[:-1]).astype(np.int64)


def _with_specials(x):
    x = x.copy()
    x[0, 2], x[1, :], x[2, 3], x[3, 1] = np.nan, -np.inf, np.inf, -0.0
    return x


def _written_after(lib, x, y, read):
    z = x + 1
    lp = lib.log_softmax(z, -1)
    x.mul_(2)  # (a leaf of the log-probs' cone written before the readers the pass gives a copy of it)
    return read(lib, lp, y), x


LSE_CASES = {  # name: (fn(lib, x, y), log_softmax nodes rewritten, with gradients)
    "cross entropy": (lambda lib, x, y: lib.nn.functional.cross_entropy(x, y), 1, True),
    "nll of log-softmax, none": (lambda lib, x, y: lib.nn.functional.nll_loss(lib.log_softmax(x * 2, -1), y,
                                                                              reduction="none"), 1, False),
    "nll of log-softmax, sum": (lambda lib, x, y: lib.nn.functional.nll_loss(lib.log_softmax(x * 2, -1), y,
                                                                             reduction="sum"), 1, True),
    "log-probs returned too": (lambda lib, x, y: (lib.log_softmax(x + 1, -1), lib.log_softmax(x + 1, -1).sum()),
                               0, False),
    "log-probs times x": (lambda lib, x, y: (lib.log_softmax(x + 1, -1) * x).sum(-1), 1, True),
    "exp summed over rows": (lambda lib, x, y: lib.log_softmax(x + 1, -1).exp().sum(0), 1, False),
    "max over the row": (lambda lib, x, y: lib.log_softmax(x + 1, 1).max(-1)[0], 1, False),
    "argmax": (lambda lib, x, y: lib.log_softmax(x + 1, 1).argmax(-1), 1, False),
    "amax over dim 0": (lambda lib, x, y: lib.log_softmax(x + 1, 1).amax(0), 1, False),
    "mean": (lambda lib, x, y: lib.log_softmax(x + 1, -1).mean(), 1, False),
    "cumsum": (lambda lib, x, y: lib.log_softmax(x + 1, -1).cumsum(-1), 0, False),
    "logsumexp": (lambda lib, x, y: lib.log_softmax(x + 1, -1).logsumexp(-1), 1, False),
    "dtype float64": (lambda lib, x, y: lib.log_softmax(x + 1, -1, dtype=lib.float64).sum(-1), 0, False),
    "dtype float32": (lambda lib, x, y: lib.log_softmax(x + 1, -1, dtype=lib.float32).sum(-1), 1, True),
    "dim 0": (lambda lib, x, y: lib.log_softmax(x + 1, 0).sum(0), 0, False),
    "written in place": (lambda lib, x, y: lib.log_softmax(x + 1, -1).mul_(2).sum(-1), 1, False),
    "a slice read": (lambda lib, x, y: lib.log_softmax(x + 1, -1)[:, :3].sum(), 0, False),
    "transposed and exp": (lambda lib, x, y: lib.log_softmax(x + 1, -1).t().exp(), 0, False),
    "two picks per row": (lambda lib, x, y: lib.log_softmax(x * 3, -1).gather(-1, lib.stack([y, y.flip(0)], 1)),
                          1, True),
    "index transposed": (lambda lib, x, y: lib.log_softmax((x * 3).reshape(5, 1, 7), -1).reshape(5, 7).gather(
        -1, lib.stack([y, y.flip(0)], 0).t()), 0, False),
    "gather along dim 0": (lambda lib, x, y: lib.log_softmax(x * 3, -1).gather(0, y[:3].view(1, 3)), 0, False),
    "gather of fewer rows": (lambda lib, x, y: lib.log_softmax(x * 3, -1).gather(1, y[:3].view(3, 1)), 0, False),
    "index as wide as the rows": (lambda lib, x, y: lib.log_softmax(x * 3, -1).gather(
        1, y.view(5, 1).expand(5, 7)), 1, False),
    "one class": (lambda lib, x, y: lib.nn.functional.cross_entropy(x[:, :1] * 2, y * 0), 1, True),
    "no rows": (lambda lib, x, y: lib.log_softmax(x[:0] * 2, -1).sum(-1), 1, False),
    "no classes": (lambda lib, x, y: lib.log_softmax(x[:, :0] * 2, -1).sum(-1), 0, False),
    "a vector": (lambda lib, x, y: lib.log_softmax(x[0] * 2, -1).gather(0, y[:2]), 1, False),
    "label smoothing": (lambda lib, x, y: lib.nn.functional.cross_entropy(x * 2, y, label_smoothing=0.1), 1, True),
    "probabilities as target": (lambda lib, x, y: lib.nn.functional.cross_entropy(x * 2, lib.softmax(x, -1)), 1,
                                True),
    "leaf written, then picked": (lambda lib, x, y: _written_after(
        lib, x, y, lambda lib, lp, y: lib.nn.functional.nll_loss(lp, y)), 1, False),
    "leaf written, then summed": (lambda lib, x, y: _written_after(
        lib, x, y, lambda lib, lp, y: lp.exp().sum(0)), 1, False),
}


@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("name", sorted(LSE_CASES))
def test_log_probs_readers_give_the_bits_they_gave_with_the_log_probs_written(name, specials, monkeypatch):
    """Each program compiled with and without the lse pass (bit for bit, gradients included), against eager and
    torch; with ``specials`` rows holding NaN, -inf throughout, inf and -0.0."""
    fn, rewrites, grad = LSE_CASES[name]
    x, y = _rows()
    if specials and not grad:
        x = _with_specials(x)
    check_lse(monkeypatch, fn, [x, y], rewrites, grad=grad and not specials)


def test_cross_entropy_in_float64_with_its_gradient(monkeypatch):
    x, y = _rows(3)
    check_lse(monkeypatch, lambda lib, x, y: lib.nn.functional.cross_entropy(x, y), [x.astype(np.float64), y], 1,
              grad=True, tol=1e-12)


def test_log_softmax_in_half_precision_is_left(monkeypatch):
    x, y = _rows(4)
    for dtype, tol in (("half", 3e-3), ("bfloat16", 3e-2)):
        check_lse(monkeypatch, lambda lib, x, y: getattr(x + 1, dtype)().log_softmax(-1).float().sum(-1), [x, y], 0,
                  tol=tol)


@pytest.mark.parametrize("offset", [7, -7])
def test_a_picked_index_out_of_range_raises_torchs_error(offset):
    """A gather copied onto the cone's leaves checks the index as the gather of the log-probs did."""
    x, y = _rows()

    def fn(lib, x, y):
        return lib.log_softmax(x * 3, -1).gather(-1, (y + offset).view(5, 1))
    with pytest.raises(RuntimeError, match="out of bounds for dimension 1 with size 7") as eager:
        fn(torch, torch.tensor(x), torch.tensor(y))
    for run in (lambda x, y: fn(jt, x, y), jt.compile(lambda x, y: fn(jt, x, y))):
        with pytest.raises(RuntimeError) as got:
            run(jt.tensor(x), jt.tensor(y))
        assert str(got.value) == str(eager.value)


LM = {  # a decoder's logits (h @ w + b) seen as rows: (fn, rewritten)
    "view of the logits": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(((h @ w) + b).view(6, 7), y), 1),
    "reshaped twice": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(
        ((h.reshape(6, 4) @ w).view(3, 2, 7) + b).reshape(6, 7), y), 1),
    "broadcast along a merged dim": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(
        ((h.reshape(6, 4) @ w).view(3, 2, 7) + b.view(1, 1, 7) * h[:, :, :1]).reshape(6, 7), y), 0),
    "transposed product reshaped": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(
        ((h.reshape(6, 4) @ w).t().reshape(6, 7) + b), y), 1),
    "rows permuted": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(
        (h.transpose(0, 1).reshape(6, 4) @ w + b).view(2, 3, 7).transpose(0, 1).reshape(6, 7), y), 0),
    "logits returned": (lambda lib, h, w, b, y: (lib.nn.functional.cross_entropy(((h @ w) + b).view(6, 7), y),
                                                 (h @ w) + b), 1),
    "logits summed too": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(((h @ w) + b).view(6, 7), y)
                          + ((h @ w) + b).sum(), 1),
    "a cone longer than MAX_CONE": (lambda lib, h, w, b, y: lib.nn.functional.cross_entropy(
        _long_cone(h @ w, b).view(6, 7), y), 0),
}


def _long_cone(z, b):
    for _ in range(lse.MAX_CONE + 2):
        z = z * 1.01 + b
    return z


@pytest.mark.parametrize("name", sorted(LM))
def test_decoder_logits_through_reshapes_with_gradients(name, monkeypatch):
    rng = np.random.default_rng(5)
    h, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2, 4), (4, 7), (7,)))
    fn, rewrites = LM[name]
    check_lse(monkeypatch, fn, [h, w, b, rng.integers(0, 7, (6,))], rewrites, grad=True)


def test_dropout_in_the_cone_draws_once(monkeypatch):
    """A random op in the log-softmax input's cone is a leaf (never copied): the mask returned is the one the
    loss saw, with the pass and without it."""
    rng = np.random.default_rng(6)
    h, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2, 4), (4, 7), (7,)))

    def fn(lib, h, w, b, y):
        z = lib.nn.functional.dropout(h @ w + b, 0.5)
        return lib.nn.functional.cross_entropy(z.view(6, 7), y), z
    jt.manual_seed(0)
    y = rng.integers(0, 7, (6,))
    new, old, _, _, count = run_both_ways(monkeypatch, fn, [h, w, b, y], False)
    assert count == 1
    for loss, z in (new, old):
        expected = torch.nn.functional.cross_entropy(torch.tensor(z).view(6, 7), torch.tensor(y))
        np.testing.assert_allclose(loss, expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_big_rows_at_one_and_two_threads(threads, monkeypatch):
    x, y = _rows(7, (300, 1000))
    before = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        check_lse(monkeypatch, lambda lib, x, y: lib.nn.functional.cross_entropy(x * 2, y), [x, y], 1, grad=True,
                  tol=1e-4)
        check_lse(monkeypatch, lambda lib, x, y: lib.log_softmax(x * 2, -1).exp().sum(0), [x, y], 1, tol=1e-4)
    finally:
        jt.set_num_threads(before)


def test_double_backward_of_cross_entropy():
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((5, 7)), rng.integers(0, 7, (5,))

    def fn(lib, x, y):
        l = lib.nn.functional.cross_entropy(x * x, y)
        g, = lib.autograd.grad(l, x, create_graph=True)
        return lib.autograd.grad((g * g).sum(), x)[0]
    got = jt.compile(lambda x, y: fn(jt, x, y))(jt.tensor(x).requires_grad_(True), jt.tensor(y))
    want = fn(torch, torch.tensor(x).requires_grad_(True), torch.tensor(y))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)


def _classifier(lib, seed):
    class Classifier(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(4, 7)

        def forward(self, h, y):
            return lib.nn.functional.cross_entropy(lib.nn.functional.gelu(self.lin(h)).view(-1, 7), y)
    model = Classifier()
    rng = np.random.default_rng(seed)
    with lib.no_grad():
        model.lin.weight.copy_(lib.tensor(rng.standard_normal((7, 4)).astype(np.float32)))
        model.lin.bias.copy_(lib.tensor(rng.standard_normal(7).astype(np.float32)))
    return model


def _model_step(lib, model, h, y):
    loss = model(lib.tensor(h), lib.tensor(y))
    loss.backward()
    return [loss.detach().numpy().copy(), model.lin.weight.grad.numpy().copy(), model.lin.bias.grad.numpy().copy()]


def test_compiled_model_step_with_gelu_logits(monkeypatch):
    """compile(model): the forward's graph ends at the loss, its backward graph apart (a split graph); GELU
    (``x * Phi(x)``) between the product and the loss. Bits with and without the pass, values against torch."""
    rng = np.random.default_rng(9)
    h, y = rng.standard_normal((3, 2, 4)).astype(np.float32), rng.integers(0, 7, (6,))
    rewritten = []
    real = lse.run
    monkeypatch.setattr(lse, "run", lambda graph: rewritten.append(real(graph)) or rewritten[-1])
    new = _model_step(jt, jt.compile(_classifier(jt, 9)), h, y)
    monkeypatch.setattr(lse, "run", lambda graph: 0)
    old = _model_step(jt, jt.compile(_classifier(jt, 9)), h, y)
    want = _model_step(torch, _classifier(torch, 9), h, y)
    assert sum(rewritten) >= 1
    for a, b, t in zip(new, old, want):
        assert _same_bits(a, b)
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=1e-6)


def test_log_softmax_of_gathered_log_probs_reads_the_rewritten_gather_seed_45100340(monkeypatch):
    """Fuzz seed 45100340 (``--losses 0.4``): a log_softmax whose input is a gather of another log_softmax's
    log-probs. The pass rewrote the gather first, then copied the second log_softmax's input as it was before
    (the removed gather): fusion failed with a KeyError on that node. The second input is now the updated one:
    both log_softmax nodes are rewritten, the bits are those of the program without the pass."""
    def fn(lib, x, y):
        picked = lib.log_softmax(x - 1, 1).gather(1, lib.tensor([[1, 0], [0, 1], [1, 1]]))
        return lib.nn.functional.nll_loss(lib.log_softmax(picked, -1), y, reduction="sum")
    x = np.random.default_rng(10).standard_normal((3, 2)).astype(np.float32)
    check_lse(monkeypatch, fn, [x, np.array([1, 0, 0])], 2, grad=True)


def test_gather_gradient_with_an_empty_index_of_fewer_dims_seed_45200343():
    """Fuzz seed 45200343 (``--losses 0.4``): log-probs of no rows gathered by an empty 1-d index (torch's gather
    takes an empty index of any dims). gather's gradient tested the one-hot form by ``index.shape[dim]`` with
    ``dim`` 1 of a 1-d index: an IndexError in backward, eager and compiled; now the scatter into zeros."""
    def fn(lib, x):
        return lib.log_softmax(x * 2, -1).gather(1, lib.tensor([], dtype=lib.int64)).sum()
    for run in (lambda x: fn(jt, x), jt.compile(lambda x: fn(jt, x))):
        x = jt.zeros(0, 1, requires_grad=True)
        run(x).backward()
        assert x.grad.shape == (0, 1)
    x = torch.zeros(0, 1, requires_grad=True)
    fn(torch, x).backward()
    assert tuple(x.grad.shape) == (0, 1)


# The recompute pass's reduction barriers ------------------------------------------------------------------------

def _normalised_then_written(lib, x):
    z = (x * 2 + 1).exp()
    s = z.sum(-1, keepdim=True)
    x.mul_(3)  # (a leaf of z's cone written before z's reader after the sum)
    return z / s, x


def _copy_written(lib, x):
    w = x + 0
    z = (w * 2).exp()
    s = z.sum(0)
    w.add_(1)
    return z * s, w


def _row_written(lib, x):
    z = (x.sin() * 2).exp()
    s = z.sum()
    x[0] = 7
    return z * s, x


@pytest.mark.parametrize("fn", [_normalised_then_written, _copy_written, _row_written])
def test_values_read_across_a_reduction_then_their_leaves_written(fn):
    """A pointwise value read by a sum and after it (the pass computes it again after the sum, from its cone's
    leaves) where the program writes a leaf in between: the reader after the sum sees the values before the write,
    as eager and torch do. The first program's kernel holds ``exp`` once (session 49: `fusion.merge_repeats` merged
    the copy after the sum into the original before it), which its row pass evaluates again from ``x`` as it did
    the copy."""
    a = np.random.default_rng(11).standard_normal((5, 7)).astype(np.float32)
    compiled = jt.compile(lambda x: fn(jt, x))
    if fn is _normalised_then_written:
        kernels = [k.ops for k in compiled.lower(jt.tensor(a)).kernels]
        assert kernels == [["mul", "add", "exp", "sum", "mul", "true_divide"]]  # (one kernel: the sum's row pass)
    for got, eager, want in zip(compiled(jt.tensor(a)), fn(jt, jt.tensor(a)), fn(torch, torch.tensor(a))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
        np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=1e-5)


def test_picked_log_probs_of_a_filled_value_keep_the_fill_value_0d_seed_45400072(monkeypatch):
    """Fuzz seed 45400072 (``--losses 0.6``): ``v0[::1] = 1`` (``fill.Tensor(v0, c)``, ``c`` 0-d) in the cone of a
    log_softmax whose log-probs a gather picks. The gather's copy of the cone gathered every leaf, the 0-d fill
    value too (expanded, then gathered: 2-d), and the compiled call raised fill's error. A 0-d leaf is now read
    as it is."""
    def fn(lib, x):
        v0 = (lib.log_softmax(x.reshape(1, 4) * 2, -1).exp() * 0.75).sum(0)
        v0[::1] = 1
        return lib.log_softmax(v0.reshape(1, 4) + 3, -1).gather(1, lib.tensor([[0, 0, 2]]))
    check_lse(monkeypatch, lambda lib, x: fn(lib, x.clone()), [np.arange(4, dtype=np.float32)], 1)
