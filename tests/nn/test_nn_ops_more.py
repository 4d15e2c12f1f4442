"""torch.embedding_bag's ATen form, F.multi_head_attention_forward, nn.AdaptiveLogSoftmaxWithLoss,
nn.CrossMapLRN2d and conv_tbc against torch: values, gradients, torch's errors, compiled == eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, normal, uniform, same_error

RNG = np.random.default_rng(139139)  # (module-level constants only)


def _lib(F):
    return torch if F.__name__.startswith("torch") else jt


def _pair(build):
    """``build(lib)`` for torch and for jitorch."""
    return build(torch), build(jt)


def _assert_same(got, want, atol=1e-6):
    assert tuple(got.shape) == tuple(want.shape) and str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=atol, rtol=atol)


# torch.embedding_bag ------------------------------------------------------------------------------------

WEIGHT = RNG.standard_normal((6, 3)).astype(np.float32)
WEIGHT[2, 1] = WEIGHT[4, 1]  # a tie in a max bag: the first index wins, as torch's
INDICES = np.array([1, 2, 4, 5, 4, 3, 2, 0])


@pytest.mark.parametrize("offsets", [[0, 2, 2, 5], [0, 2, 2, 5, 8]], ids=["empty-bag", "empty-last"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_torch_embedding_bag_gives_atens_four_results(offsets, mode, padding_idx, include_last_offset, grad):
    """output, offset2bag (empty for a plain sum), bag_size (zeros for a sum: as many as offsets without grad,
    as bags with, as torch's two kernels) and max_indices (the first maximum's row per column)."""
    if include_last_offset and offsets[-1] != len(INDICES):
        return  # (torch then averages the last bag over the rest of the input; jitorch refuses: documented)

    def call(lib):
        weight = lib.tensor(WEIGHT, requires_grad=grad)
        return weight, lib.embedding_bag(weight, lib.tensor(INDICES), lib.tensor(offsets), False, mode, False, None,
                                         include_last_offset, padding_idx)

    (tw, want), (jw, got) = _pair(call)
    for g, w in zip(got, want):
        _assert_same(g, w)
    if grad:
        want[0].sum().backward()
        got[0].sum().backward()
        _assert_same(jw.grad, tw.grad)


def test_torch_embedding_bag_with_per_sample_weights_matches_torch():
    weights = uniform((len(INDICES),)).astype(np.float32)
    (want, got) = _pair(lambda lib: lib.embedding_bag(lib.tensor(WEIGHT), lib.tensor(INDICES), lib.tensor([0, 3, 5]),
                                                      False, 0, False, lib.tensor(weights), False, None))
    for g, w in zip(got, want):
        _assert_same(g, w)


def test_torch_embedding_bag_needs_offsets_as_torch():
    with pytest.raises(TypeError, match="argument 'offsets' \\(position 3\\) must be Tensor, not NoneType"):
        jt.embedding_bag(jt.tensor(WEIGHT), jt.tensor(INDICES.reshape(2, 4)), None)


# F.multi_head_attention_forward ---------------------------------------------------------------------------

E, H, L, S, N = 8, 2, 3, 4, 2


def _mha_arrays(dtype):
    shapes = {"q": (L, N, E), "k": (S, N, E), "v": (S, N, E), "w": (3 * E, E), "b": (3 * E,), "ow": (E, E),
              "ob": (E,), "bk": (1, 1, E), "bv": (1, 1, E)}
    return {name: (normal(shape, key) * 0.5).astype(dtype) for key, (name, shape) in enumerate(shapes.items())}


MASK = RNG.random((L, S)) < 0.3
KPM = RNG.random((N, S)) < 0.3
KPM[:, 0] = False


@pytest.mark.parametrize("dtype,tol", [(np.float32, 5e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("kwargs", [
    {}, {"need_weights": False}, {"attn_mask": MASK}, {"key_padding_mask": KPM, "average_attn_weights": False},
    {"bias": True, "add_zero_attn": True}, {"attn_mask": MASK, "key_padding_mask": KPM, "need_weights": False}],
    ids=["plain", "no-weights", "mask", "padding-per-head", "bias-kv-zero-attn", "both-masks-sdpa"])
def test_multi_head_attention_forward_matches_torch(dtype, tol, kwargs):
    a = _mha_arrays(dtype)
    kwargs = dict(kwargs)
    bias = kwargs.pop("bias", False)
    zero = kwargs.pop("add_zero_attn", False)

    def fn(F, q, k, v, w, b, ow, ob, bk, bv):
        lib = _lib(F)
        extra = {name: lib.tensor(m) if isinstance(m, np.ndarray) else m for name, m in kwargs.items()}
        out, weights = F.multi_head_attention_forward(q, k, v, E, H, w, b, bk if bias else None,
                                                      bv if bias else None, zero, 0.0, ow, ob, **extra)
        assert (weights is None) == (kwargs.get("need_weights", True) is False)
        return out if weights is None else (out, weights)

    check(fn, a["q"], a["k"], a["v"], a["w"], a["b"], a["ow"], a["ob"], a["bk"], a["bv"], atol=tol, rtol=tol)


def test_multi_head_attention_forward_with_separate_weights_and_static_kv_matches_torch():
    a = _mha_arrays(np.float64)
    wq, wk, wv = (normal((E, E), key) for key in range(3))
    static = normal((N * H, S + 1, E // H))

    def fn(F, q, k, v, wq, wk, wv, b, ow, ob, sk, sv):
        return F.multi_head_attention_forward(q, k, v, E, H, None, b, None, None, False, 0.0, ow, ob,
                                              use_separate_proj_weight=True, q_proj_weight=wq, k_proj_weight=wk,
                                              v_proj_weight=wv, static_k=sk, static_v=sv)

    check(fn, a["q"], a["k"], a["v"], wq, wk, wv, a["b"], a["ow"], a["ob"], static, static * 0.5, atol=1e-12,
          rtol=1e-12)


def test_unbatched_multi_head_self_attention_matches_torch_and_compiles():
    a = _mha_arrays(np.float32)

    def fn(F, x, w, b, ow, ob):
        return F.multi_head_attention_forward(x, x, x, E, H, w, b, None, None, False, 0.0, ow, ob)

    check(fn, a["q"][:, 0], a["w"], a["b"], a["ow"], a["ob"], compiled=True)


@pytest.mark.parametrize("case", ["embed-dim", "divisible", "bias-k-only", "static-with-bias", "mask-3d", "kv-shape"])
def test_multi_head_attention_forward_errors_as_torch(case):
    a = _mha_arrays(np.float32)
    q, k, v, w, b, ow, ob, bk = (a[n] for n in ("q", "k", "v", "w", "b", "ow", "ob", "bk"))
    calls = {
        "embed-dim": lambda F, *t: F.multi_head_attention_forward(*t[:3], E + 1, H, *t[3:5], None, None, False, 0.0,
                                                                  *t[5:7]),
        "divisible": lambda F, *t: F.multi_head_attention_forward(*t[:3], E, 3, *t[3:5], None, None, False, 0.0,
                                                                  *t[5:7]),
        "bias-k-only": lambda F, *t: F.multi_head_attention_forward(*t[:3], E, H, *t[3:5], t[7], None, False, 0.0,
                                                                    *t[5:7]),
        "static-with-bias": lambda F, *t: F.multi_head_attention_forward(*t[:3], E, H, *t[3:5], t[7], t[7], False,
                                                                         0.0, *t[5:7], static_k=t[0]),
        "mask-3d": lambda F, *t: F.multi_head_attention_forward(*t[:3], E, H, *t[3:5], None, None, False, 0.0,
                                                                *t[5:7], attn_mask=t[0]),
        "kv-shape": lambda F, *t: F.multi_head_attention_forward(t[0], t[1], t[2][:2], E, H, *t[3:5], None, None,
                                                                 False, 0.0, *t[5:7]),
    }
    same_error(calls[case], q, k, v, w, b, ow, ob, bk)


def test_the_module_runs_the_functional_form():
    """nn.MultiheadAttention is the functional form with its parameters: same outputs, batch first included."""
    jt.manual_seed(0)
    m = jt.nn.MultiheadAttention(E, H, batch_first=True, kdim=6, vdim=5)
    x = jt.tensor(normal((N, L, E)).astype(np.float32))
    k = jt.tensor(normal((N, S, 6)).astype(np.float32))
    v = jt.tensor(normal((N, S, 5)).astype(np.float32))
    out, weights = m(x, k, v)
    want, want_weights = JF.multi_head_attention_forward(
        x.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), E, H, None, m.in_proj_bias, None, None, False, 0.0,
        m.out_proj.weight, m.out_proj.bias, use_separate_proj_weight=True, q_proj_weight=m.q_proj_weight,
        k_proj_weight=m.k_proj_weight, v_proj_weight=m.v_proj_weight)
    np.testing.assert_array_equal(out.detach().numpy(), want.transpose(0, 1).detach().numpy())
    np.testing.assert_array_equal(weights.detach().numpy(), want_weights.detach().numpy())


# nn.AdaptiveLogSoftmaxWithLoss ----------------------------------------------------------------------------

def _adaptive():
    reference = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6], div_value=2.0, head_bias=True)
    mine = jt.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6], div_value=2.0, head_bias=True)
    mine.load_state_dict({k: jt.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()})
    return reference, mine


def test_adaptive_log_softmax_matches_torch_with_gradients():
    reference, mine = _adaptive()
    x = normal((7, 8)).astype(np.float32)
    y = np.array([0, 4, 9, 2, 7, 5, 1])
    tx, jx = torch.tensor(x, requires_grad=True), jt.tensor(x, requires_grad=True)
    want, got = reference(tx, torch.tensor(y)), mine(jx, jt.tensor(y))
    _assert_same(got.output, want.output)
    _assert_same(got.loss, want.loss)
    want.loss.backward()
    got.loss.backward()
    _assert_same(jx.grad, tx.grad)
    for name, p in reference.named_parameters():
        _assert_same(dict(mine.named_parameters())[name].grad, p.grad)
    _assert_same(mine.log_prob(jx), reference.log_prob(tx))
    assert mine.predict(jx).tolist() == reference.predict(tx).tolist()
    one_t, one_j = reference(tx[0], torch.tensor(y[0])), mine(jx[0], jt.tensor(y[0]))
    _assert_same(one_j.output, one_t.output)


def test_adaptive_log_softmax_errors_as_torch():
    reference, mine = _adaptive()
    for x_shape, y in [((7, 8), np.arange(7) + 5), ((7, 8), np.arange(6)), ((7, 8), np.zeros((7, 1), np.int64)),
                       ((2, 7, 8), np.arange(2))]:
        x = np.zeros(x_shape, np.float32)
        with pytest.raises(RuntimeError) as want:
            reference(torch.tensor(x), torch.tensor(y))
        with pytest.raises(RuntimeError) as got:
            mine(jt.tensor(x), jt.tensor(y))
        assert str(got.value).replace("jitorch", "torch") == str(want.value)
    for cutoffs in ([], [3, 3], [0, 4], [4, 10]):
        with pytest.raises(ValueError) as want:
            torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs)
        with pytest.raises(ValueError) as got:
            jt.nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs)
        assert str(got.value) == str(want.value)


def test_linear_of_batched_input_with_no_features_gives_the_bias():
    """Regression: a 3-D input with no features (an adaptive softmax's tail of 0 hidden features) raised a NumPy
    reshape error in linear's kernel; torch gives the bias in every row (found by the API coverage's
    AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8]) smoke call)."""
    for shape in ((2, 3, 0), (2, 0, 0), (3, 0)):
        for grad in (False, True):
            (want, got) = _pair(lambda lib: lib.nn.functional.linear(lib.zeros(*shape, requires_grad=grad),
                                                                     lib.ones(2, shape[-1]), lib.ones(2)))
            _assert_same(got, want)


# nn.CrossMapLRN2d ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [2, 3, 4, 5, 9])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float64, 1e-14)])
def test_cross_map_lrn2d_matches_torchs_legacy_forward_and_backward(size, dtype, tol):
    """torch's legacy window (channel 0 is never dropped from the running sum) and its own backward formula,
    which is not the forward's derivative: both as torch computes them."""
    x = normal((2, 7, 3, 2)).astype(dtype)
    g = normal((2, 7, 3, 2), 1).astype(dtype)
    (tx, want), (jx, got) = _pair(lambda lib: (lambda x: (x, lib.nn.CrossMapLRN2d(size, 0.3, 0.75, 1.5)(x)))(
        lib.tensor(x, requires_grad=True)))
    _assert_same(got, want, tol)
    want.backward(torch.tensor(g))
    got.backward(jt.tensor(g))
    _assert_same(jx.grad, tx.grad, tol)


def test_cross_map_lrn2d_of_3d_input_raises_as_torch():
    for lib in (torch, jt):
        with pytest.raises(ValueError, match="CrossMapLRN2d: Expected input to be 4D, got 3D instead."):
            lib.nn.CrossMapLRN2d(3)(lib.zeros(2, 3, 4))
    assert repr(jt.nn.CrossMapLRN2d(3)) == repr(torch.nn.CrossMapLRN2d(3))


# conv_tbc -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pad", [0, 1, 2])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_conv_tbc_matches_torch_and_compiles(pad, dtype, tol):
    arrays = [normal(s).astype(dtype) for s in ((5, 2, 3), (3, 3, 4), (4,))]
    check(lambda F, x, w, b: F.conv_tbc(x, w, b, pad), *arrays, atol=tol, rtol=tol, compiled=pad == 1)
    assert jt.conv_tbc is JF.conv_tbc


@pytest.mark.parametrize("shapes", [((5, 2), (3, 3, 4), (4,)), ((5, 2, 3), (3, 4), (4,)),
                                    ((5, 2, 3), (3, 3, 4), (1, 4)),
                                    ((5, 2, 3), (3, 2, 4), (4,)), ((5, 2, 3), (3, 3, 4), (5,)),
                                    ((5, 2, 3), (7, 3, 4), (4,))])
def test_conv_tbc_errors_as_torch(shapes):
    same_error(lambda F, x, w, b: F.conv_tbc(x, w, b), *(np.zeros(s, np.float32) for s in shapes))
