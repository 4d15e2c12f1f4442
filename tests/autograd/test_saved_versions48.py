"""A write into a tensor between the forward and the backward raises exactly where torch's raises, eager and compiled.

torch's node of an op saves the tensors its derivative formula names (derivatives.yaml) and checks their versions
when the backward reaches it: "one of the variables needed for gradient computation has been modified by an
inplace operation". jitorch composes many of torch's ops (leaky_relu, the losses, the norms) of ops whose nodes save
other tensors, and a compiled call's backward graph reads what its forward saved: each must still check what
torch's node saves (`engine.saves_also`, `Graph.saved_eagerly`), or a write gives the gradient of the forward's
values where torch raises. For each call below, each tensor argument (and the result) is written in place after
the forward, with each choice of which arguments require grad, and jitorch's backward must raise where torch's
does and give torch's gradients where it does not.
"""

import warnings
import zlib

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.fuzz.models import check_model, generate_model

S = (2, 6)
S4 = (1, 2, 4, 4)


def _f(T):
    return T.nn.functional


# name -> (call(T, *tensors), argument specs: a shape, or (shape, kind): "p" positive, "u" in (0, 1), "i" classes,
# "s" signs)
CASES = {
    "relu": (lambda T, x: _f(T).relu(x), [S]),
    "leaky_relu": (lambda T, x: _f(T).leaky_relu(x, 0.1), [S]),
    "leaky_relu_inplace": (lambda T, x: _f(T).leaky_relu(x, 0.1, inplace=True), [S]),
    "softplus": (lambda T, x: _f(T).softplus(x), [S]),
    "elu": (lambda T, x: _f(T).elu(x), [S]),
    "elu_inplace": (lambda T, x: _f(T).elu(x, inplace=True), [S]),
    "celu": (lambda T, x: _f(T).celu(x, 0.5), [S]),
    "selu": (lambda T, x: _f(T).selu(x), [S]),
    "gelu": (lambda T, x: _f(T).gelu(x), [S]),
    "gelu_tanh": (lambda T, x: _f(T).gelu(x, approximate="tanh"), [S]),
    "silu": (lambda T, x: _f(T).silu(x), [S]),
    "mish": (lambda T, x: _f(T).mish(x), [S]),
    "hardswish": (lambda T, x: _f(T).hardswish(x), [S]),
    "hardsigmoid": (lambda T, x: _f(T).hardsigmoid(x), [S]),
    "hardtanh": (lambda T, x: _f(T).hardtanh(x), [S]),
    "hardtanh_inplace": (lambda T, x: _f(T).hardtanh(x, inplace=True), [S]),
    "relu6": (lambda T, x: _f(T).relu6(x), [S]),
    "sigmoid": (lambda T, x: T.sigmoid(x), [S]),
    "tanh": (lambda T, x: T.tanh(x), [S]),
    "logsigmoid": (lambda T, x: _f(T).logsigmoid(x), [S]),
    "softsign": (lambda T, x: _f(T).softsign(x), [S]),
    "tanhshrink": (lambda T, x: _f(T).tanhshrink(x), [S]),
    "softshrink": (lambda T, x: _f(T).softshrink(x), [S]),
    "hardshrink": (lambda T, x: _f(T).hardshrink(x), [S]),
    "prelu": (lambda T, x, w: _f(T).prelu(x, w), [S, (1,)]),
    "glu": (lambda T, x: _f(T).glu(x), [S]),
    "softmax": (lambda T, x: _f(T).softmax(x, -1), [S]),
    "log_softmax": (lambda T, x: _f(T).log_softmax(x, -1), [S]),
    "layer_norm": (lambda T, x, w, b: _f(T).layer_norm(x, (6,), w, b), [S, (6,), (6,)]),
    "layer_norm_plain": (lambda T, x: _f(T).layer_norm(x, (6,)), [S]),
    "group_norm": (lambda T, x, w, b: _f(T).group_norm(x, 2, w, b), [(2, 4, 3), (4,), (4,)]),
    "batch_norm": (lambda T, x, w, b: _f(T).batch_norm(x, None, None, w, b, training=True), [(4, 3), (3,), (3,)]),
    "instance_norm": (lambda T, x: _f(T).instance_norm(x), [(2, 3, 4)]),
    "instance_norm_affine": (lambda T, x, w, b: _f(T).instance_norm(x, weight=w, bias=b), [(2, 3, 4), (3,), (3,)]),
    "rms_norm": (lambda T, x, w: _f(T).rms_norm(x, (6,), w), [S, (6,)]),
    "normalize": (lambda T, x: _f(T).normalize(x), [S]),
    "linear": (lambda T, x, w, b: _f(T).linear(x, w, b), [S, (3, 6), (3,)]),
    "mse_loss": (lambda T, x, y: _f(T).mse_loss(x, y), [S, S]),
    "l1_loss": (lambda T, x, y: _f(T).l1_loss(x, y), [S, S]),
    "smooth_l1_loss": (lambda T, x, y: _f(T).smooth_l1_loss(x, y), [S, S]),
    "huber_loss": (lambda T, x, y: _f(T).huber_loss(x, y), [S, S]),
    "binary_cross_entropy": (lambda T, x, y: _f(T).binary_cross_entropy(x, y), [(S, "u"), (S, "u")]),
    "bce_with_logits": (lambda T, x, y: _f(T).binary_cross_entropy_with_logits(x, y), [S, (S, "u")]),
    "cross_entropy": (lambda T, x, t: _f(T).cross_entropy(x, t), [S, ((2,), "i")]),
    "nll_loss": (lambda T, x, t: _f(T).nll_loss(x, t), [S, ((2,), "i")]),
    "kl_div": (lambda T, x, y: _f(T).kl_div(x, y, reduction="batchmean"), [S, (S, "u")]),
    "cosine_similarity": (lambda T, x, y: _f(T).cosine_similarity(x, y), [S, S]),
    "pairwise_distance": (lambda T, x, y: _f(T).pairwise_distance(x, y), [S, S]),
    "scaled_dot_product_attention": (lambda T, q, k, v: _f(T).scaled_dot_product_attention(q, k, v),
                                     [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)]),
    "embedding": (lambda T, i, w: _f(T).embedding(i, w), [((3,), "i"), (4, 5)]),
    "threshold": (lambda T, x: _f(T).threshold(x, 0.1, 0.0), [S]),
    "threshold_inplace": (lambda T, x: _f(T).threshold(x, 0.1, 0.0, inplace=True), [S]),
    "soft_margin_loss": (lambda T, x, y: _f(T).soft_margin_loss(x, y), [S, (S, "s")]),
    "multi_margin_loss": (lambda T, x, t: _f(T).multi_margin_loss(x, t), [S, ((2,), "i")]),
    "reflection_pad": (lambda T, x: _f(T).pad(x, (1, 1), mode="reflect"), [(1, 2, 4)]),
    "replication_pad": (lambda T, x: _f(T).pad(x, (1, 1), mode="replicate"), [(1, 2, 4)]),
    "circular_pad": (lambda T, x: _f(T).pad(x, (1, 1), mode="circular"), [(1, 2, 4)]),
    "max_pool1d": (lambda T, x: _f(T).max_pool1d(x, 2), [(1, 2, 6)]),
    "max_pool2d": (lambda T, x: _f(T).max_pool2d(x, 2), [S4]),
    "avg_pool1d": (lambda T, x: _f(T).avg_pool1d(x, 2), [(1, 2, 6)]),
    "avg_pool2d": (lambda T, x: _f(T).avg_pool2d(x, 2), [S4]),
    "adaptive_avg_pool2d": (lambda T, x: _f(T).adaptive_avg_pool2d(x, 2), [S4]),
    "adaptive_max_pool2d": (lambda T, x: _f(T).adaptive_max_pool2d(x, 2), [S4]),
    "conv1d": (lambda T, x, w: _f(T).conv1d(x, w), [(1, 2, 5), (3, 2, 2)]),
    "conv2d": (lambda T, x, w, b: _f(T).conv2d(x, w, b), [S4, (3, 2, 2, 2), (3,)]),
    "conv_transpose2d": (lambda T, x, w: _f(T).conv_transpose2d(x, w), [S4, (2, 3, 2, 2)]),
    "grid_sample": (lambda T, x, g: _f(T).grid_sample(x, g, align_corners=False), [S4, (1, 3, 3, 2)]),
    "pdist": (lambda T, x: _f(T).pdist(x), [(3, 4)]),
    "prod": (lambda T, x: x.prod(-1), [S]),
    "gather": (lambda T, x, i: x.gather(1, i), [S, ((2, 2), "i")]),
    "addcmul": (lambda T, a, b, c: T.addcmul(a, b, c), [S, S, S]),
    "addcdiv": (lambda T, a, b, c: T.addcdiv(a, b, c), [S, S, (S, "p")]),
    "dist": (lambda T, x, y: T.dist(x, y), [S, S]),
    "exp": (lambda T, x: T.exp(x), [S]),
    "log": (lambda T, x: T.log(x), [(S, "p")]),
    "sin": (lambda T, x: T.sin(x), [S]),
    "sqrt": (lambda T, x: T.sqrt(x), [(S, "p")]),
    "rsqrt": (lambda T, x: T.rsqrt(x), [(S, "p")]),
    "erf": (lambda T, x: T.erf(x), [S]),
    "reciprocal": (lambda T, x: x.reciprocal(), [(S, "p")]),
    "square": (lambda T, x: x.square(), [S]),
    "pow_scalar": (lambda T, x: T.pow(x, 3), [S]),
    "pow_tensor": (lambda T, x, y: T.pow(x, y), [(S, "p"), S]),
    "mul": (lambda T, x, y: x * y, [S, S]),
    "div": (lambda T, x, y: x / y, [S, (S, "p")]),
    "atan2": (lambda T, x, y: T.atan2(x, y), [S, S]),
    "where": (lambda T, x, y: T.where(x > 0, x, y), [S, S]),
    "matmul": (lambda T, x, y: x @ y, [S, (6, 3)]),
    "addmm": (lambda T, b, x, y: T.addmm(b, x, y), [(3,), S, (6, 3)]),
    "sum": (lambda T, x: x.sum(), [S]),
    "mean": (lambda T, x: x.mean(-1), [S]),
    "var": (lambda T, x: x.var(-1), [S]),
    "std": (lambda T, x: x.std(-1), [S]),
    "norm": (lambda T, x: x.norm(), [S]),
    "logsumexp": (lambda T, x: x.logsumexp(-1), [S]),
    "cumsum": (lambda T, x: x.cumsum(-1), [S]),
    "cumprod": (lambda T, x: x.cumprod(-1), [S]),
    "amax": (lambda T, x: x.amax(-1), [S]),
    "max_dim": (lambda T, x: x.max(-1)[0], [S]),
    "abs": (lambda T, x: x.abs(), [S]),
    "clamp": (lambda T, x: x.clamp(-0.5, 0.5), [S]),
}

# Known differences, each recorded where it stands (strict: a fix makes the test pass and must remove the entry).
# jitorch and its compiled calls agree; torch is stricter or laxer, and no gradient is silently wrong.
EAGER_OPEN = {
    # torch's pow.Tensor_Tensor saves its result even where the exponent wants no gradient; jitorch's rule reads
    # it only for the exponent's (and a number exponent, one rule with this op, must not save it)
    "pow_tensor-first-result": "torch's pow saves its result whatever wants a gradient",
    # torch's instance norm normalises a (1, N*C, ...) view with the weight repeated N times: it saves the
    # repeated copy, not the weight; jitorch's product by the weight saves the weight
    "instance_norm_affine-all-arg1": "torch saves a repeated copy of the weight",
    "instance_norm_affine-first-arg1": "torch saves a repeated copy of the weight",
    # torch's codegen saves a tensor that two formulas read whatever wants a gradient (addcdiv's tensor2), and one
    # that one formula reads only where its argument wants one: jitorch's per-argument rules save by the latter
    "addcdiv-first-arg2": "torch's addcdiv saves tensor2 for self's gradient too",
    # torch's dist is one node saving both operands and its result; jitorch's composition saves their difference
    **{f"dist-{which}-arg{i}": "torch's dist node saves its operands" for which in ("all", "first", "rest")
       for i in (0, 1)},
}
def _kinds(specs):
    return [(spec if len(spec) == 2 and isinstance(spec[1], str) else (spec, "n")) for spec in specs]


def _values(name, specs):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out = []
    for shape, kind in _kinds(specs):
        if kind == "s":  # (signs: a margin loss's target)
            out.append(np.where(rng.standard_normal(shape) > 0, 1.0, -1.0).astype(np.float32))
        elif kind == "p":
            out.append(np.abs(rng.standard_normal(shape)).astype(np.float32) + 0.5)
        elif kind == "u":
            out.append(rng.uniform(0.1, 0.9, shape).astype(np.float32))
        elif kind == "i":
            out.append(rng.integers(0, 3, shape).astype(np.int64))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


def _grad_sets(specs):
    """Which arguments require grad: all floating ones (not class indices nor the signs torch refuses a gradient
    for), the first alone, the others alone (where each differs)."""
    floating = [kind not in ("i", "s") for _, kind in _kinds(specs)]
    sets = {"all": floating}
    if len(specs) > 1:
        sets["first"] = [floating[0]] + [False] * (len(specs) - 1)
        sets["rest"] = [False] + floating[1:]
    return {k: g for k, g in sets.items() if any(g)}


def _params():
    params = []
    for name, (_, specs) in CASES.items():
        for which in _grad_sets(specs):
            for write in [f"arg{i}" for i in range(len(specs))] + ["result"]:
                params.append((name, which, write))
    return params


PARAMS = _params()


def _marked(known):
    return [pytest.param(*p, marks=pytest.mark.xfail(strict=True, reason=known[key]))
            if (key := "-".join(p)) in known else pytest.param(*p, id=key) for p in PARAMS]


def _outcome(T, call, name, which, write):
    """("raise",) where the backward raises torch's modified-by-an-inplace-operation error, else ("ok", the
    leaves' gradients); the exception's type and message for any other error."""
    values = _values(name, CASES[name][1])
    wants = _grad_sets(CASES[name][1])[which]
    leaves = [T.tensor(v, requires_grad=bool(w)) for v, w in zip(values, wants)]
    tensors = [t.clone() if t.requires_grad else t for t in leaves]
    y = call(T, *tensors)
    target = y if write == "result" else tensors[int(write[3:])]
    if target.dtype.is_floating_point:
        target.add_(1.0)
    else:
        target.zero_()
    try:
        (y * 1.5).sum().backward()
    except RuntimeError as e:
        if "modified by an inplace operation" in str(e):
            return ("raise",)
        return (type(e).__name__, str(e))
    return ("ok", [None if t.grad is None else np.asarray(t.grad.detach().numpy()) for t in leaves])


def _same(got, want):
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        for g, w in zip(got[1], want[1]):
            assert (g is None) == (w is None)
            if w is not None:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, which, write", _marked(EAGER_OPEN))
def test_a_write_after_the_forward_raises_where_torchs_does(name, which, write):
    call = CASES[name][0]
    _same(_outcome(jt, call, name, which, write), _outcome(torch, call, name, which, write))


_COMPILED: dict = {}


def _compiled(name, which):
    """One compiled function per call and grad set: the writes reuse its compiled forward and backward."""
    key = (name, which)
    if key not in _COMPILED:
        call = CASES[name][0]
        compiled = jt.compile(lambda *tensors: call(jt, *tensors))
        _COMPILED[key] = lambda T, *tensors: compiled(*tensors)
    return _COMPILED[key]


@pytest.mark.parametrize("name, which, write", _marked(EAGER_OPEN))
def test_a_write_after_a_compiled_forward_raises_where_torchs_does(name, which, write):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _outcome(jt, _compiled(name, which), name, which, write)
    _same(got, _outcome(torch, CASES[name][0], name, which, write))


def test_two_training_forwards_of_a_batch_norm_before_one_backward_are_no_error():
    """torch's batch norm kernel updates its running statistics without bumping their versions, so its node's saved
    running statistics do not refuse a second training forward before the backward (gradient accumulation over two
    batches); only evaluation mode's are checked."""
    for T in (torch, jt):
        m = T.nn.BatchNorm1d(3)
        x = T.tensor(_values("bn", [(4, 3)])[0], requires_grad=True)
        (m(x).pow(2).sum() + m(x * 2).pow(2).sum()).backward()
        m.eval()
        y = m(x)
        m.running_mean.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.pow(2).sum().backward()


def test_a_backward_through_a_composed_activation_frees_its_input_then_refuses_a_second():
    """The node that checks a composed activation's input frees it after the backward, as torch's node does, and a
    second backward without retain_graph raises torch's error."""
    for T in (torch, jt):
        x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = _f(T).leaky_relu(x * 1, 0.1)
        y.sum().backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.sum().backward()


def test_a_compiled_layer_norm_raises_where_eager_does_after_its_weight_is_written_seed_9067():
    """Fuzz seed 9067 of ``--models`` (minimised: a compiled layer norm of an input that wants no gradient, its
    weight written through a view between the forward and the backward): eager's and torch's layer norm node saves
    the weight and raises; the compiled call's backward graph, which needs no input gradient, reads no weight, and
    the trace's record of what eager saved held the module's own weight (the real tensor the library code passed),
    which it matched against the lifted copies alone: no check, and the gradient of the forward's weight."""
    layer = jt.nn.LayerNorm(5)
    x = jt.tensor(_values("ln", [(3, 5)])[0])
    for run in (layer, jt.compile(layer)):
        with warnings.catch_warnings(), pytest.raises(RuntimeError, match="modified by an inplace operation"):
            warnings.simplefilter("ignore")
            y = run(x)
            with jt.no_grad():
                layer.weight[0].add_(0.25)
            (y * 1.5).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check_model(generate_model(9067)).mismatches
