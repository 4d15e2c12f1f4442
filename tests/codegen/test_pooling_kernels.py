"""What a convolutional network's compiled step needs from the kernel builder, checked against torch:

- max.dim, min.dim, argmax and argmin as generated reduction kernels (lowering.Reduction.indexed): the kernel
  keeps the chosen element's index beside the accumulator; the first of equal elements wins (-0.0 equals
  0.0), and the first NaN wins over every number, as torch and NumPy choose. The compiled graphs hold no
  eager step for these ops; max_pool's forward reduces its windows in place (no copy of the windows).
- as_strided of a permuted value (a convolution's windows of its batch-last input) folds into a kernel.
- kernels that transpose (write along one dim, read along another) walk both in tiles.
"""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.nn import functional as F

OPS = {
    "max.dim": lambda t, d, k: t.max(d, keepdim=k),
    "min.dim": lambda t, d, k: t.min(d, keepdim=k),
    "argmax": lambda t, d, k: t.argmax(d, keepdim=k),
    "argmin": lambda t, d, k: t.argmin(d, keepdim=k),
}


def lowered(compiled, *args):
    """(kernel ops, eager step reprs) of ``compiled`` for ``args``."""
    low = compiled.lower(*args)
    return [op for k in low.kernels for op in k.ops], [repr(s) for s in low.steps if "kernel" not in repr(s)]


def to_torch(x):
    """``x`` as a torch tensor of its dtype (bfloat16 through float32, which holds it exactly)."""
    if x.dtype is jt.bfloat16:
        return torch.from_numpy(x.float().numpy()).to(torch.bfloat16)
    return torch.from_numpy(x.numpy().copy())


def as_numpy(t):
    """A result as NumPy, bfloat16 widened to float64 (exactly) for the comparison."""
    if isinstance(t, torch.Tensor):
        return t.float().numpy() if t.dtype is torch.bfloat16 else t.numpy()
    return t.numpy().astype(np.float64) if t.dtype is jt.bfloat16 else t.numpy()


def check(name, x, dim, keepdim):
    """Compiled ``name`` over ``dim`` equals torch's and eager's results, and runs in a kernel."""
    fn = OPS[name]
    compiled = jt.compile(lambda t: fn(t, dim, keepdim))
    ops, eager = lowered(compiled, x)
    assert name in ops and not any(name in s for s in eager), (ops, eager)
    got = compiled(x)
    expected = fn(to_torch(x), dim, keepdim)
    own = fn(x, dim, keepdim)
    pairs = zip(got, expected, own) if name.endswith(".dim") else [(got, expected, own)]
    for g, e, o in pairs:
        assert g.dtype == o.dtype and tuple(g.shape) == tuple(e.shape)
        np.testing.assert_array_equal(as_numpy(g), as_numpy(e))
        np.testing.assert_array_equal(as_numpy(g), as_numpy(o))


def specials(shape, dtype=np.float32, seed=0):
    """Random numbers with NaN, infinities, signed zeros and repeated values scattered through them."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, -2.0]), shape)
    return np.where(rng.random(shape) < 0.5, rng.standard_normal(shape), x).astype(dtype)


@pytest.mark.parametrize("name", OPS)
def test_every_dim_with_nan_infinities_zeros_and_ties(name):
    x = jt.tensor(specials((5, 6, 7)))
    for dim, keepdim in ((0, False), (1, True), (-1, False)):
        check(name, x, dim, keepdim)


def test_rows_where_nan_infinity_or_ties_decide():
    rows = np.array([[1.0, np.nan, 3.0, np.nan], [-np.inf] * 4, [np.inf, 2.0, np.inf, 1.0], [2.0] * 4,
                     [-0.0, 0.0, -0.0, 0.0], [0.0, -0.0, 0.0, -0.0], [np.nan, -np.nan, 1.0, 1.0]], np.float32)
    for name in OPS:
        check(name, jt.tensor(rows), 1, False)


@pytest.mark.parametrize("dtype", [jt.int64, jt.int8, jt.uint8])
def test_integers_with_their_extremes(dtype):
    info = jt.iinfo(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max, (4, 9), endpoint=True, dtype=dtype.np)
    x[0] = info.min
    x[1] = info.max
    x[2, ::2] = info.max
    for i, name in enumerate(OPS):
        check(name, jt.tensor(x), i % 2, i < 2)


@pytest.mark.parametrize("dtype", [jt.float64, jt.float16, jt.bfloat16])
def test_other_float_dtypes(dtype):
    x = jt.tensor(specials((6, 5), np.float64, seed=2)).to(dtype)
    for i, name in enumerate(OPS):
        check(name, x, i % 2, False)


def test_bool_max_and_min():
    x = jt.tensor(np.random.default_rng(3).random((4, 5)) < 0.5)
    check("max.dim", x, 1, False)
    check("min.dim", x, 0, True)


def test_non_contiguous_inputs():
    base = jt.tensor(specials((8, 10, 6), seed=4))
    for x in (base.transpose(0, 2), base[::2, 1:9:3], base[:, 3]):
        for i, name in enumerate(OPS):
            check(name, x, i % x.ndim, False)


def test_whole_tensor_argmax_and_argmin():
    x = jt.tensor(specials((2, 3, 5), seed=5))
    for name in ("argmax", "argmin"):
        fn = getattr(jt.Tensor, name)
        for keepdim in (False, True):
            compiled = jt.compile(lambda t: fn(t, keepdim=keepdim))
            assert name in lowered(compiled, x)[0]
            got = compiled(x)
            expected = getattr(torch.Tensor, name)(torch.from_numpy(x.numpy()), keepdim=keepdim)
            assert tuple(got.shape) == tuple(expected.shape)
            np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_long_rows_stay_with_eager():
    """Past `INDEXED_MAX_COUNT` elements the kernel's loop (which keeps an index, and does not vectorise)
    is slower than eager's NumPy argmax: those reductions run as eager steps."""
    from jitorch.codegen.lowering import INDEXED_MAX_COUNT
    x = jt.tensor(specials((4, INDEXED_MAX_COUNT + 1), seed=10))
    compiled = jt.compile(lambda t: t.max(1))
    ops, eager = lowered(compiled, x)
    assert "max.dim" not in ops and any("max.dim" in s for s in eager)
    got, expected = compiled(x), to_torch(x).max(1)
    np.testing.assert_array_equal(got.indices.numpy(), expected.indices.numpy())
    check("argmax", jt.tensor(specials((4, INDEXED_MAX_COUNT), seed=11)), 1, False)


def test_epilogue_fuses_and_empty_dims_raise_as_torch():
    x = jt.randn(6, 9)
    ops, _ = lowered(jt.compile(lambda t: t.max(1).values * 2 + 1), x)
    assert {"max.dim", "mul", "add"} <= set(ops)
    kept = jt.zeros(0, 4)  # reducing a non-empty dim of an empty tensor: an empty result
    assert jt.compile(lambda t: t.max(1))(kept).indices.shape == (0,)
    with pytest.raises(IndexError) as ours:
        jt.compile(lambda t: t.max(0))(jt.zeros(0, 4))
    with pytest.raises(IndexError) as theirs:
        torch.zeros(0, 4).max(0)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", [(2, 2, 0, False), (3, 2, 1, True), (3, 1, 0, False),
                                                               (3, 3, 0, False)])
def test_max_pool_step_has_no_eager_max_and_matches_torch(kernel, stride, padding, ceil_mode):
    # (no NaN: torch's max_pool2d picks a window's last NaN, jitorch's eager and compiled pools its first)
    x = np.nan_to_num(specials((2, 3, 9, 9), seed=6), nan=3.0)
    x[0, 0, :3, :3] = 1.0  # a window of ties
    w = np.random.default_rng(7).standard_normal((2, 3, 4, 4)).astype(np.float32)

    def step(lib, t):
        pooled, idx = lib.nn.functional.max_pool2d(t.relu() * 2, kernel, stride, padding, ceil_mode=ceil_mode,
                                                   return_indices=True)
        (pooled.nan_to_num(0.0) * (pooled.shape[-1] + 1)).sum().backward()
        return pooled, idx, t.grad

    compiled = jt.compile(lambda t: step(jt, t))
    t = jt.tensor(x, requires_grad=True)
    ops, eager = lowered(jt.compile(lambda t: F.max_pool2d(t.relu() * 2, kernel, stride, padding, ceil_mode=ceil_mode)), t)
    assert "max.dim" in ops and not any("max.dim" in s for s in eager)
    assert not any(view in s for s in eager for view in ("as_strided", "view")), eager  # windows read in place
    if kernel == stride and not padding and x.shape[-1] % kernel == 0:
        # windows that tile the input: their gradient is a copy back, not a scatter into zeros
        backward = [repr(s) for s in compiled.lower(t).steps]
        assert not any(op in s for s in backward for op in ("as_strided_scatter", "new_zeros")), backward
    got = compiled(t)
    expected = step(torch, torch.tensor(x, requires_grad=True))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g.detach().numpy(), e.detach().numpy())


def test_as_strided_of_a_permuted_value_folds_where_affine():
    """A convolution's windows of its batch-last input (kernel.strided_as_strided) are copied by a kernel,
    not by an eager step; an as_strided whose index would carry from one dim into the next is refused."""
    from jitorch.codegen.kernel import strided_as_strided
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((4, 3, 9, 9)).astype(np.float32), rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    compiled = jt.compile(lambda t, k: F.conv2d(t, k, stride=2))
    steps = [repr(s) for s in compiled.lower(jt.tensor(x), jt.tensor(w)).steps]
    assert any("kernel" in s and "permute as_strided" in s for s in steps), steps
    assert not any("eager" in s and "as_strided" in s for s in steps), steps
    np.testing.assert_allclose(compiled(jt.tensor(x), jt.tensor(w)).numpy(),
                               torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=2).numpy(),
                               rtol=1e-5, atol=1e-5)
    permuted = ((2, 3, 5, 6), (90, 1, 18, 3), 0)  # x.permute(0, 3, 1, 2) over x's memory
    assert strided_as_strided(*permuted, (3, 4), (30, 6), 7) == ((3, 4), (1, 18), 18 + 3)  # starts at [0, 0, 1, 1]
    assert strided_as_strided(*permuted, (5, 7), (7, 1), 3) is None  # 7 elements along a row of 6: a carry


def test_transposing_kernels_walk_tiles_and_match():
    from jitorch.codegen.kernel import TILE, _tiled
    sizes, accesses = _tiled([4, 64, 96], [[6144, 1, 64], [6144, 96, 1]], 1)  # read transposed, write compact
    assert sizes == [4, 4, 6, TILE, TILE]
    assert accesses == [[6144, TILE, 64 * TILE, 1, 64], [6144, 96 * TILE, TILE, 96, 1]]
    assert _tiled([4, 60, 96], [[5760, 1, 60], [5760, 96, 1]], 1)[0] == [4, 60, 96]  # 60 is not whole tiles
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((3, 96, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32)
    compiled = jt.compile(lambda x, y: (x.transpose(1, 2) + y).relu())
    np.testing.assert_array_equal(compiled(jt.tensor(a), jt.tensor(b)).numpy(),
                                  np.maximum(a.transpose(0, 2, 1) + b, 0))
