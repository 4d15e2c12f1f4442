"""float32 asin, acos, atan, asinh, acosh and atanh are jitorch's own definitions (jitorch/ops/arc_functions.py):
computed in double and rounded once, eager and compiled alike (fuzz seed 7610488: eager's NumPy float32 loops
were 1 ulp from torch on 17-36% of elements, and from the compiled kernels on as many)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import arc_functions, powers

NAMES = sorted(arc_functions.ALGORITHMS)
EXACT = {"asin": mpmath.asin, "acos": mpmath.acos, "atan": mpmath.atan, "asinh": mpmath.asinh,
         "acosh": mpmath.acosh, "atanh": mpmath.atanh}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-45, -1e-45, 1.1754944e-38,
           3.4028235e38, -3.4028235e38, 0.41421357, 2.4142137, 1.0000001, 0.99999994, -0.99999994, 1e-8]


def _operands(name):
    """Spread float32 bit patterns (both signs, every binade) and the special values, in the op's domain
    mostly."""
    bits = np.arange(0, 2 ** 32, 2 ** 32 // 397 + 1, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([np.array(SPECIAL, np.float32), bits.view(np.float32)])
    if name in ("asin", "acos", "atanh"):
        x = np.concatenate([x, np.float32(np.random.default_rng(1).uniform(-1, 1, 200))])
    if name == "acosh":
        x = np.concatenate([x, np.float32(1 + np.random.default_rng(2).exponential(1e-3, 200))])
    return x


def _correctly_rounded(name, x):
    mpmath.mp.prec = 100
    out = []
    for v in x.tolist():
        try:
            r = EXACT[name](mpmath.mpf(v))
        except (ValueError, ZeroDivisionError):
            r = mpmath.nan
        out.append(np.nan if not isinstance(r, mpmath.mpf) or mpmath.isnan(r) else float(r))
    # (rounded via double: these arguments' results are nowhere near a midpoint between floats at 100 bits)
    return np.array(out, np.float64).astype(np.float32)


def _same_bits(a, b):
    """The same bits but for NaNs' sign and payload (each backend's, its hardware's default NaN), NaN where the
    other is NaN."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and a[~nan].tobytes() == b[~nan].tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_float32_arc_functions_are_correctly_rounded_and_eager_equals_compiled(name):
    x = _operands(name)
    eager = getattr(jt, name)(jt.tensor(x)).numpy()
    want = _correctly_rounded(name, x)
    assert np.array_equal(eager, want, equal_nan=True)
    nonzero = (want != 0) & ~np.isnan(want)  # (mpmath has no -0.0: zeros are checked against torch below)
    assert np.array_equal(np.signbit(eager[nonzero]), np.signbit(want[nonzero]))
    fn = lambda a: getattr(jt, name)(a) * 2  # noqa: E731
    assert [str(s) for s in jt.explain(fn, jt.tensor(x)).steps] == [f"<kernel jitorch_k0_pointwise: {name} mul>"]
    compiled = jt.compile(fn)(jt.tensor(x)).numpy()
    assert _same_bits(compiled, eager * 2)
    theirs = getattr(torch, name)(torch.from_numpy(x)).numpy()  # (torch's SLEEF: within 1 ulp, acosh's 2)
    assert np.array_equal(np.isnan(eager), np.isnan(theirs))
    assert np.array_equal(np.signbit(eager[eager == 0]), np.signbit(theirs[eager == 0]))
    finite = np.isfinite(theirs)
    assert np.abs(eager[finite].view(np.int32).astype(np.int64) - theirs[finite].view(np.int32)).max() <= 2


@pytest.mark.parametrize("name", NAMES)
def test_each_eager_path_gives_the_same_bits(name, monkeypatch):
    """Python floats (up to `powers.SINGLE_EACH_MAX` elements), the compiled kernel (above), NumPy arrays (where
    no kernel is built): one definition, the same bits; which path ran is asserted."""
    x = _operands(name)
    ran = []
    kernel = powers.KERNEL
    monkeypatch.setattr(powers, "KERNEL", lambda op, dtype: ran.append(op) or kernel(op, dtype))
    whole = getattr(jt, name)(jt.tensor(x)).numpy()
    assert ran == [name]
    small = np.concatenate([getattr(jt, name)(jt.tensor(x[i:i + 5])).numpy() for i in range(0, len(x), 5)])
    assert ran == [name] and _same_bits(small, whole)
    monkeypatch.setattr(powers, "KERNEL", None)
    assert _same_bits(getattr(jt, name)(jt.tensor(x)).numpy(), whole)


def test_half_types_round_the_float32_definition_eager_and_compiled():
    x = jt.tensor(np.linspace(-3, 3, 61, dtype=np.float32))
    for dtype in (jt.float16, jt.bfloat16):
        h = x.to(dtype)
        compiled = jt.compile(lambda a: [getattr(jt, name)(a) for name in NAMES])(h)
        for name, c in zip(NAMES, compiled):
            eager = getattr(jt, name)(h)
            np.testing.assert_array_equal(c.float().numpy(), eager.float().numpy())
            np.testing.assert_array_equal(eager.float().numpy(), getattr(jt, name)(h.float()).to(dtype).float().numpy())


@pytest.mark.parametrize("name", NAMES)
def test_strided_offset_and_broadcast_inputs_give_the_contiguous_bits_eager_and_compiled(name):
    rng = np.random.default_rng(3)
    low = 1.0 if name == "acosh" else -1.0
    base = np.float32(rng.uniform(low, low + 2.0, (9, 12)))
    views = {
        "transposed": lambda t: t.t(),
        "offset and stepped": lambda t: t[1:, 2::3],
        "broadcast": lambda t: t[2:3, :].expand(5, 12),
    }
    fn = lambda t: getattr(t, name)()  # noqa: E731
    compiled = jt.compile(fn)
    for label, view in views.items():
        x = view(jt.tensor(base))
        want = getattr(torch, name)(view(torch.tensor(base)).contiguous())
        eager, graph = fn(x), compiled(x)
        contiguous = fn(x.contiguous())
        assert eager.shape == x.shape, label
        assert np.array_equal(eager.numpy(), contiguous.numpy(), equal_nan=True), label
        assert np.array_equal(graph.numpy(), contiguous.numpy(), equal_nan=True), label
        np.testing.assert_allclose(eager.numpy(), want.numpy(), rtol=2.5e-7, atol=0, equal_nan=True, err_msg=label)
