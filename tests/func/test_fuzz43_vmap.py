"""vmap, vmap(grad) and jvp failures of the transform fuzzer (tests/fuzz/transforms.py) triaged in session 43, each
against torch and a second oracle: eager torch on each sample, the per-sample loop, float64 values."""

import numpy as np
import pytest
import torch

import jitorch


def _factors_with_a_zero_pivot():
    """Three samples of two 3x3 lower factors; sample 1's first has a zero at diagonal place 2 (1-based)."""
    a = np.tile(np.tril(np.arange(1.0, 10.0, dtype=np.float32).reshape(3, 3)), (3, 2, 1, 1))
    a[1, 0, 1, 1] = 0.0
    return a


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_inverse_of_a_factor_with_a_zero_pivot_raises_seed_7999141(upper):
    """Seeds 7999141, 8007387: ``x.cholesky_inverse()`` of a factor with a zero on its diagonal gave infinities and
    NaNs; torch (LAPACK's potri) raises LinAlgError "The diagonal element k is zero", eagerly on that sample and
    under vmap. jitorch now raises the same, eager, vmapped and compiled. (Under vmap torch names the element of the
    flattened physical batch, jitorch's per-sample check the element of the sample: the numbers differ.)"""
    a = _factors_with_a_zero_pivot()
    message = "The diagonal element 2 is zero, the inversion could not be completed because the input matrix is singular"
    for T in (torch, jitorch):
        with pytest.raises(T.linalg.LinAlgError, match=f"cholesky_inverse: {message}"):
            T.cholesky_inverse(T.tensor(a[1, 0]), upper)
        with pytest.raises(T.linalg.LinAlgError, match=r"cholesky_inverse: \(Batch element 2\): " + message):
            T.cholesky_inverse(T.tensor(a.reshape(6, 3, 3)), upper)
        with pytest.raises(T.linalg.LinAlgError, match=r"cholesky_inverse: \(Batch element \d\): " + message):
            T.func.vmap(lambda x: T.cholesky_inverse(x, upper))(T.tensor(a))
    with pytest.raises(jitorch.linalg.LinAlgError, match=message):
        jitorch.compile(lambda x: jitorch.cholesky_inverse(x, upper) + 1)(jitorch.tensor(a[1]))
    good = a[[0, 2]]
    want = torch.func.vmap(lambda x: torch.cholesky_inverse(x, upper))(torch.tensor(good))
    got = jitorch.func.vmap(lambda x: jitorch.cholesky_inverse(x, upper))(jitorch.tensor(good))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float16", "float32"])
def test_cumulative_trapezoid_of_integers_multiplies_in_their_dtype_seed_7895898(dtype):
    """Seed 7895898: ``cumulative_trapezoid(v, v)`` of a uint8 ``v`` gave 3432 where torch gives 104: jitorch halved
    the spacing first (a float, so the product did not wrap); torch multiplies spacing and sums in the operands'
    dtype, wrapping, then halves. Eager, under vmap and against a NumPy evaluation of torch's formula."""
    rows = [[200, 100, 7, 127], [3, 250, 9, 1], [9, 100, 70, 125]]
    y, x = (np.array(r, dtype=dtype) for r in (rows[:2], rows[1:]))
    with np.errstate(over="ignore"):
        spacing = (x[:, 1:] - x[:, :-1]) * (y[:, :-1] + y[:, 1:])
    want = np.cumsum(spacing.astype(np.float32) / 2, axis=-1)
    theirs = torch.cumulative_trapezoid(torch.tensor(y), torch.tensor(x))
    got = jitorch.cumulative_trapezoid(jitorch.tensor(y), jitorch.tensor(x))
    mapped = jitorch.func.vmap(jitorch.cumulative_trapezoid)(jitorch.tensor(y), jitorch.tensor(x))
    assert got.dtype == mapped.dtype == (jitorch.float16 if dtype == "float16" else jitorch.float32)
    assert got.tolist() == mapped.tolist() == theirs.tolist()
    np.testing.assert_allclose(got.numpy().astype(np.float32), want, rtol=1e-3 if dtype == "float16" else 1e-6)


def test_histogram_bins_of_edges_that_do_not_increase_are_torchs_seed_7896234():
    """Seed 7896234: ``x.histogram(x)`` (the data as its own edges, not increasing) counted [2, 0, 0, 3] where torch
    counts [2, 1, 0, 2]: NumPy's searchsorted starts each search from the last key's place, torch's kernel bisects
    afresh (std::upper_bound). Against torch on 200 random unordered edge lists, for histogram and histogramdd,
    and under vmap."""
    rng = np.random.default_rng(7896234)
    for _ in range(200):
        edges = (rng.integers(-4, 5, rng.integers(2, 12)) / 2).astype(np.float32)
        x = (rng.integers(-5, 6, rng.integers(0, 20)) / 2).astype(np.float32)
        want = torch.histogram(torch.tensor(x), torch.tensor(edges))[0].tolist()
        assert jitorch.histogram(jitorch.tensor(x), jitorch.tensor(edges))[0].tolist() == want
        got = jitorch.histogramdd(jitorch.tensor(x).reshape(-1, 1), [jitorch.tensor(edges)])[0]
        assert got.tolist() == torch.histogramdd(torch.tensor(x).reshape(-1, 1), [torch.tensor(edges)])[0].tolist()
    x = np.array([[0.0, 0.125, 3.0, 2.75, 1.5], [-1.75, -1.5, 0.625, -1.625, 2.375]], np.float32)
    want = torch.func.vmap(lambda v: torch.histogram(v, v)[0])(torch.tensor(x))
    assert want.tolist() == [[1, 2, 0, 0], [2, 1, 0, 2]]
    assert jitorch.func.vmap(lambda v: jitorch.histogram(v, v)[0])(jitorch.tensor(x)).tolist() == want.tolist()


@pytest.mark.parametrize("data, given", [([1.0, float("nan")], None), ([float("nan")], None),
                                         ([1.0, float("inf")], None), ([1.0, 2.0], (0.0, float("inf")))])
def test_histogram_of_a_range_that_is_not_finite_raises_seed_7892606(data, given):
    """Seed 7892606: ``histogram(v, 10)`` of data holding a NaN gave NaN edges and no count; torch raises "range
    [nan, nan] is not finite" (so did jitorch's histogramdd), eagerly and under vmap."""
    for T in (torch, jitorch):
        with pytest.raises(RuntimeError, match=r"torch.histogramdd: dimension 0's range \[.*\] is not finite"):
            T.histogram(T.tensor(data), 3, range=given)
        with pytest.raises(RuntimeError, match="is not finite"):
            T.func.vmap(lambda v: T.histogram(v, 3, range=given)[0])(T.tensor([data, data]))
    assert jitorch.histogram(jitorch.tensor([float("nan")]), 3, range=(0.0, 1.0))[0].tolist() == [0, 0, 0]


def _fill_through_meshgrid(T, mask):
    def fn(x):
        grid = T.meshgrid([x, x])[0]  # (each sample's [4, 4] view of x, its columns one memory location)
        grid.fill_(2.0)
        y = x * 3
        y.expand(2, 4).masked_fill_(mask, -1.0)
        z = x + 1
        z.expand(3, 4).zero_()
        return grid * 1, x, y, z
    return fn


def test_fill_through_an_expanded_sample_writes_it_under_vmap_seed_7997433():
    """Seed 7997433: ``v = meshgrid([x, x, x])[0]; v.fill_(2.0)`` under vmap raised "more than one element of the
    written-to tensor refers to a single memory location": vmap wrote the batched result back with copy_, which
    refuses an expanded target; eager torch and jitorch (and torch's vmap) let fill_, zero_ and masked_fill_
    write through one; each sample now writes its own. Against torch's vmap and the per-sample loop, with a mask
    that differs along the expanded dim."""
    rows = np.array([[0.5, -1.0, 2.0, 3.0], [1.5, 0.0, -2.0, 4.0], [2.5, 1.0, 5.0, -3.0]], np.float64)
    mask = [[True, False, True, False], [False, False, True, True]]
    want = torch.func.vmap(_fill_through_meshgrid(torch, torch.tensor(mask)))(torch.tensor(rows))
    got = jitorch.func.vmap(_fill_through_meshgrid(jitorch, jitorch.tensor(mask)))(jitorch.tensor(rows))
    loop = [_fill_through_meshgrid(jitorch, jitorch.tensor(mask))(jitorch.tensor(r)) for r in rows]
    for j, (g, w) in enumerate(zip(got, want)):
        assert g.tolist() == w.tolist() == jitorch.stack([out[j] for out in loop]).tolist()
    assert got[0].tolist() == [[[2.0] * 4] * 4] * 3 and got[3].tolist() == [[0.0] * 4] * 3


def _expanded_writes(T):
    mask = T.tensor([[True, False, True, False], [False, False, True, True]])
    index = T.tensor([1, 3, 1])

    def grid_fill(x, c):
        x = x * 1
        T.meshgrid([x, x])[0].fill_(2.0)
        return x * 1

    def zero(x, c):
        x = x * 1
        x.expand(2, 4).zero_()
        return x * c

    def masked(x, c):
        x = x * 1
        x.expand(2, 4).masked_fill_(mask, c)
        return x * 1

    def put(x, c):
        x = x * 1
        x.expand(2, 4)[mask] = c
        return x * 1

    def accumulate(x, c):
        x = x * 1
        x.expand(3, 4).index_put_((T.tensor([0, 1, 2]), index), c * T.ones(3, dtype=x.dtype), True)
        return x * 1
    return [grid_fill, zero, masked, put, accumulate]


@pytest.mark.parametrize("k", range(5))
def test_a_write_through_an_expanded_view_writes_its_tangent_into_the_base_seed_7997433(k):
    """Seed 7997433: ``v = meshgrid([x, x, x])[0]; v.fill_(2.0)`` left x's tangent as it was (torch's: 0): the
    tangent of the expanded target, which cannot take a write, was replaced by a new tensor and x's tangent never
    saw the write. It is now written through x's tangent element by element as the primal is (fill_, zero_,
    masked_fill_, index_put_ with and without accumulate). Against torch.func.jvp and float64 central differences."""
    primal, direction = (np.arange(4.0) - 1.5, np.float64(5.0)), (np.array([1.0, -2.0, 0.5, 3.0]), np.float64(3.0))
    want = torch.func.jvp(_expanded_writes(torch)[k], tuple(map(torch.tensor, primal)),
                          tuple(map(torch.tensor, direction)))
    fn = _expanded_writes(jitorch)[k]
    got = jitorch.func.jvp(fn, tuple(map(jitorch.tensor, primal)), tuple(map(jitorch.tensor, direction)))
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    eps = 1e-6
    ends = [fn(*(jitorch.tensor(p + s * eps * d) for p, d in zip(primal, direction))).numpy() for s in (1, -1)]
    np.testing.assert_allclose(got[1].numpy(), (ends[0] - ends[1]) / (2 * eps), atol=1e-6)


def _vander_loss(T):
    weights = T.arange(16.0, dtype=T.float64).reshape(4, 4)
    return lambda v: (T.vander(v) * weights).sum()


def _empty_view_loss(T):
    def loss(v):
        u = (v + 1)[0:0]
        u.exp_()
        return u.sum() + (v * v).sum()
    return loss


@pytest.mark.parametrize("make", [_vander_loss, _empty_view_loss])
def test_vmap_grad_runs_where_torch_raises_its_own_inplace_error_seeds_8002504_7893180(make):
    """Seeds 8002504, 7898644 (``vander``) and 7893180 (``u = v[0:0]; u.exp_()``): torch's vmap(grad) raises vmap's
    "inplace arithmetic(self, *extra_args) is not possible" from inside its own differentiation (torch's vander
    writes its powers in place, and torch's autograd then raises "modified by an inplace operation" even eagerly;
    its backward of an in-place op on an empty view) where its plain vmap of the same function runs: no write of
    the program is batched into an unbatched tensor. jitorch's vmap(grad) gives the per-sample loop's gradients,
    which are float64 central differences'."""
    rows = np.array([[0.5, 1.5, -2.0, 3.0], [1.0, 2.0, 0.25, -1.0]])
    with pytest.raises(RuntimeError, match=r"vmap: inplace arithmetic\(self, \*extra_args\) is not possible"):
        torch.func.vmap(torch.func.grad(make(torch)))(torch.tensor(rows))
    torch.func.vmap(make(torch))(torch.tensor(rows))
    got = jitorch.func.vmap(jitorch.func.grad(make(jitorch)))(jitorch.tensor(rows))
    loop = [jitorch.func.grad(make(jitorch))(jitorch.tensor(r)).tolist() for r in rows]
    assert got.tolist() == loop
    loss, eps = make(torch), 1e-6
    fd = [[(loss(torch.tensor(r + eps * e)) - loss(torch.tensor(r - eps * e))).item() / (2 * eps) for e in np.eye(4)]
          for r in rows]
    np.testing.assert_allclose(got.numpy(), fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_vander_under_vmap_is_batched_for_any_n_seed_7991388(n):
    """Seed 7991388: ``vander`` of a one-element sample (every column x**0) was a plain, unbatched tensor of ones
    under vmap, so a batched value written into it in place raised vmap's in-place error where torch's vmap and
    the per-sample loop run, and the tensor stored during the call stayed readable after it (torch's: a batched
    tensor that escaped). Its columns are now made like x, batched as torch's."""
    rows = np.array([[0.5], [1.5], [2.0]])

    def write(T):
        def fn(x):
            v = T.vander(x, n)
            v.add_(x[:, None][:, :n])
            return v
        return fn
    want = torch.func.vmap(write(torch))(torch.tensor(rows))
    got = jitorch.func.vmap(write(jitorch))(jitorch.tensor(rows))
    assert got.tolist() == want.tolist() == [write(jitorch)(jitorch.tensor(r)).tolist() for r in rows]
    stored = []
    jitorch.func.vmap(lambda x: stored.append(jitorch.vander(x, n)) or x * 1)(jitorch.tensor(rows))
    with pytest.raises(RuntimeError, match="a batched tensor was used after the vmap that made it"):
        stored[0] + 0


def test_aminmax_keeping_every_dim_under_vmap_is_the_loops_seed_7898675():
    """Seed 7898675: ``x.aminmax(keepdim=True)[1]`` of [1, 1] samples: each sample's call (torch's too) gives
    [1, 1], and jitorch's vmap stacks [B, 1, 1]; torch's vmap gives [B, 1], so the program's next index,
    ``v[0:3:2, 0:-1:1]``, raised IndexError under torch's vmap where jitorch's reached ``.item()`` of a batched
    value (vmap's error, the right one). The transform fuzzer judges such programs by the loop alone."""
    x = np.arange(24.0, dtype=np.float32).reshape(3, 4, 2)
    loop = torch.stack([torch.aminmax(torch.tensor(s), keepdim=True)[1] for s in x])
    assert tuple(loop.shape) == (3, 1, 1)
    assert tuple(torch.func.vmap(lambda v: torch.aminmax(v, keepdim=True)[1])(torch.tensor(x)).shape) == (3, 1)
    got = jitorch.func.vmap(lambda v: jitorch.aminmax(v, keepdim=True)[1])(jitorch.tensor(x))
    assert got.tolist() == loop.tolist()
    with pytest.raises(RuntimeError, match="reading the values of a batched Tensor"):
        jitorch.func.vmap(lambda v: v.max().item() + v)(jitorch.tensor(x))


def _write_after_view_as(T, view):
    def fn(x0, x1):
        v1 = x1[0] * 0 - x1[1]
        v3 = view(v1, x0)
        v1[-1] = 3
        return v3 * 1, v1 * 1
    return fn


@pytest.mark.parametrize("view", [lambda v, x: v.expand_as(x), lambda v, x: v.view_as(x),
                                  lambda v, x: v.reshape_as(x), lambda v, x: v.expand(x.shape)])
def test_the_tangent_of_expand_as_is_a_view_of_its_operands_seed_7887539(view):
    """Seed 7887539: ``v3 = v1.expand_as(x0); v1[-1] = 3`` left v3's tangent at its old value where torch's is 0:
    with a tangent on ``other`` (x0) too, expand_as's tangent was computed afresh rather than as the same view of
    v1's tangent, so the write into v1's tangent missed it (likewise view_as). Against torch.func.jvp and float64
    central differences."""
    primal = (np.array([1.0, 2.0, 3.0, 4.0]), np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]))
    direction = (np.ones(4), np.array([[0.5, -1.0, 2.0, 1.5], [1.5, 1.0, -0.5, 3.0]]))
    want = torch.func.jvp(_write_after_view_as(torch, view), tuple(map(torch.tensor, primal)),
                          tuple(map(torch.tensor, direction)))[1]
    fn = _write_after_view_as(jitorch, view)
    got = jitorch.func.jvp(fn, tuple(map(jitorch.tensor, primal)), tuple(map(jitorch.tensor, direction)))[1]
    assert [t.tolist() for t in got] == [t.tolist() for t in want]
    assert got[0].tolist()[-1] == 0.0
    eps = 1e-6
    ends = [fn(*(jitorch.tensor(p + s * eps * d) for p, d in zip(primal, direction))) for s in (1, -1)]
    for j in range(2):
        np.testing.assert_allclose(got[j].numpy(), (ends[0][j].numpy() - ends[1][j].numpy()) / (2 * eps), atol=1e-6)


@pytest.mark.parametrize("write", [lambda v: v.fill_(3.0), lambda v: v.add_(2.0), lambda v: v.zero_()])
def test_jvp_through_a_write_into_sgn_of_a_0d_tensor_runs_seed_7887190(write):
    """Seed 7887190: ``v = x.sgn(); v.fill_(3)`` of a 0-d ``x``: torch.func.jvp raises "ZeroTensors are immutable"
    (sgn's tangent is torch's immutable zero), a torch limit; jitorch's tangents are central differences' (x's
    own, and v's 0: sgn is flat away from 0 and the writes add constants)."""
    def fn(T):
        def f(x):
            v = x.sgn()
            write(v)
            return x * 2, v * 1
        return f
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        torch.func.jvp(fn(torch), (torch.tensor(1.5, dtype=torch.float64),), (torch.tensor(2.0, dtype=torch.float64),))
    x, t = np.float64(1.5), np.float64(2.0)
    _, got = jitorch.func.jvp(fn(jitorch), (jitorch.tensor(x),), (jitorch.tensor(t),))
    eps = 1e-6
    ends = [fn(jitorch)(jitorch.tensor(x + s * eps * t)) for s in (1, -1)]
    assert [g.item() for g in got] == pytest.approx([(a - b).item() / (2 * eps) for a, b in zip(*ends)], abs=1e-6)
    assert [g.item() for g in got] == [4.0, 0.0]


def test_the_tangent_of_clip_at_a_nan_input_is_the_reverse_rules_0_seed_7884625():
    """Seed 7884625: ``v.sqrt_()`` of negative elements, then ``v.clip(x0, x1)``: jitorch's tangent is 0 at the NaN
    results (its forward mode transposes the reverse rule), torch.func.jvp's forward formula NaN; torch's
    reverse-mode jvp gives jitorch's 0 where the bounds do not broadcast the result, and raises where they do
    ("doesn't match the broadcast shape"): no oracle there, so the fuzzer accepts 0 for NaN at NaN results."""
    a, b = np.array([[-1.0, 4.0], [2.0, -0.5]]), np.array([[0.5, 1.0], [3.0, 1.0]])
    ta, tb = np.array([[1.0, 2.0], [0.5, 3.0]]), np.full((2, 2), 2.0)

    def fn(x, hi):
        v = x * 1
        v.sqrt_()
        return v.clip(x, hi)
    reverse = torch.autograd.functional.jvp(fn, (torch.tensor(a), torch.tensor(b)), (torch.tensor(ta), torch.tensor(tb)))
    forward = torch.func.jvp(fn, (torch.tensor(a), torch.tensor(b)), (torch.tensor(ta), torch.tensor(tb)))
    got = jitorch.func.jvp(fn, (jitorch.tensor(a), jitorch.tensor(b)), (jitorch.tensor(ta), jitorch.tensor(tb)))
    assert np.isnan(got[0].numpy()).tolist() == [[True, False], [False, True]]
    assert got[1].tolist() == reverse[1].tolist()
    assert got[1].tolist()[0][0] == 0.0 and np.isnan(forward[1][0, 0].item())
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.autograd.functional.jvp(fn, (torch.tensor(a), torch.tensor(b[None])), (torch.tensor(ta), torch.tensor(tb[None])))


@pytest.mark.parametrize("reshape", [lambda v: v.unsqueeze_(-1), lambda v: v.t_(), lambda v: v.transpose_(0, 1),
                                     lambda v: v.unsqueeze_(0).squeeze_(0), lambda v: v.swapdims_(0, 1),
                                     lambda v: v.as_strided_((3, 1), (1, 3))])
def test_an_in_place_view_op_keeps_the_tangent_a_view_of_the_inputs_seed_8300542(reshape):
    """Seed 8300542 (a new seed of session 43): ``v = x[1:, :]; v.unsqueeze_(-1); v[:, 1:] = -1.75`` of the jvp input
    ``x`` left the written elements' tangents (of v and of x) at their old values where torch's are 0: the in-place
    view op gave v a new tangent, a copy, no longer a view of x's. The target's tangent now takes the same view
    in place. Against torch.func.jvp."""
    def fn(T):
        def f(x):
            v = x[1:, :]
            reshape(v)
            v.view(-1)[1:] = -1.75
            return v * 1, x * 1
        return f
    x, t = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]), np.full((2, 3), 2.875)
    want = torch.func.jvp(fn(torch), (torch.tensor(x),), (torch.tensor(t),))
    got = jitorch.func.jvp(fn(jitorch), (jitorch.tensor(x),), (jitorch.tensor(t),))
    assert [g.tolist() for g in got[1]] == [w.tolist() for w in want[1]]
    assert got[1][1].tolist() == [[2.875] * 3, [2.875, 0.0, 0.0]]


def test_jvp_through_matmul_out_of_a_batch_by_a_matrix_runs_seed_8300898():
    """Seed 8300898 (a new seed of session 43): ``T.matmul(c.asinh(), w, out=o)`` of a captured [2, 5, 1] batch by a
    [1, 3] matrix inside a function under jvp: torch.func.jvp raises NotImplementedError "Cannot access storage of
    TensorWrapper" (its matmul folds into an mm writing a view of ``o``), a torch limit; jitorch's primal and
    tangent are those of the product without ``out=``, and torch's without ``out=``."""
    w, c = np.array([[1.75, -0.625, -0.625]]), np.linspace(-1.0, 1.0, 10).reshape(2, 5, 1)
    x, t = np.linspace(-2.0, 1.0, 30).reshape(2, 5, 3), np.linspace(0.5, 2.0, 30).reshape(2, 5, 3)

    def fn(T, out):
        def f(v):
            if not out:
                return T.matmul(T.tensor(c).asinh(), T.tensor(w)) * v
            o = T.zeros(2, 5, 3, dtype=T.float64)
            T.matmul(T.tensor(c).asinh(), T.tensor(w), out=o)
            return o * v
        return f
    with pytest.raises(NotImplementedError, match="Cannot access storage of TensorWrapper"):
        torch.func.jvp(fn(torch, True), (torch.tensor(x),), (torch.tensor(t),))
    want = torch.func.jvp(fn(torch, False), (torch.tensor(x),), (torch.tensor(t),))
    got = jitorch.func.jvp(fn(jitorch, True), (jitorch.tensor(x),), (jitorch.tensor(t),))
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w_.numpy(), rtol=1e-12)


def test_jvp_of_pow_by_a_bool_exponent_runs_seed_8302179():
    """Seed 8302179 (a new seed of session 43): ``x1.pow_(x0)`` with a bool 0-d ``x0``: torch.func.jvp raises
    "Subtraction, the `-` operator, with a bool tensor is not supported" (its forward formula takes ``x0 - 1``), a
    torch limit; jitorch's result and tangent are torch's for the same exponent as an integer."""
    x, t = np.array([1.5, 2.0, -0.5]), np.array([1.0, 3.0, 0.25])
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
        torch.func.jvp(lambda v: v.clone().pow_(torch.tensor(True)), (torch.tensor(x),), (torch.tensor(t),))
    for flag in (True, False):
        want = torch.func.jvp(lambda v: v.clone().pow_(torch.tensor(int(flag))), (torch.tensor(x),), (torch.tensor(t),))
        got = jitorch.func.jvp(lambda v: v.clone().pow_(jitorch.tensor(flag)), (jitorch.tensor(x),), (jitorch.tensor(t),))
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
