"""Tangents through views and in-place ops, as torch's: a view's tangent is the same view of its base's
tangent, an in-place op writes its target's tangent in place (fuzz seeds of tests/fuzz/transforms.py)."""

import torch

import jitorch
from jitorch.autograd import forward_ad as fwd


def _jvp_both(build, x, t):
    """``jvp`` of ``build(T)`` at float64 ``x`` along ``t`` in torch and jitorch: their flat results."""
    found = []
    for T in (torch, jitorch):
        primals, tangents = T.func.jvp(build(T), (T.tensor(x, dtype=T.float64),), (T.tensor(t, dtype=T.float64),))
        found.append([v.tolist() for v in (*primals, *tangents)])
    return found


def _close(got, want):
    return torch.allclose(torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64),
                          rtol=1e-12, atol=1e-12)


def test_a_view_taken_before_an_inplace_write_sees_its_tangent_seed_7840014():
    """Seed 7840014's kind (first seen as seed 5): ``v = x.movedim(..)`` then ``x.round_()``; v's tangent
    stayed x's old one (2.70 where torch's is 0)."""
    def build(T):
        def f(x):
            v = x.movedim(1, 0)
            x[0] = 1.0
            x.round_()
            return (v,)
        return f
    x, t = [[0.3, -1.2], [2.6, 0.1]], [[1.0, 2.0], [-0.5, 3.0]]
    got, want = _jvp_both(build, x, t)
    assert got == want == [[[1.0, 3.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]


def test_a_write_through_a_view_reaches_the_base_tangent_seed_7840006():
    """Seed 7840006: ``v = x.movedim(-1, -2); x.reciprocal_(); v.erf_()``, then x's tangent ignored the erf."""
    def build(T):
        def f(x):
            v = x.movedim(-1, -2)
            x.reciprocal_()
            v.erf_()
            return (x,)
        return f
    got, want = _jvp_both(build, [[[0.4]]], [[[1.5]]])
    assert _close(got, want)


def test_the_view_tangent_shares_the_base_tangent_memory():
    with fwd.dual_level():
        x = fwd.make_dual(jitorch.ones(3, 2, dtype=jitorch.float64), jitorch.ones(3, 2, dtype=jitorch.float64))
        v = x.t()[1]
        x.mul_(3)
        tv, tx = fwd.unpack_dual(v).tangent, fwd.unpack_dual(x).tangent
        assert tv.untyped_storage().data_ptr() == tx.untyped_storage().data_ptr()
        assert tv.tolist() == [3.0, 3.0, 3.0]


def test_a_clone_tangent_is_not_written_by_a_later_inplace_op_seed_7840036():
    """Seed 7840036: clone's tangent was its operand's own tensor (its derivative passes it on), so an in-place
    op on the operand, now writing its tangent in place, would have changed the clone's."""
    def build(T):
        def f(x):
            y = x * 1.0
            c = y.clone()
            y.atan_()
            return c, y
        return f
    got, want = _jvp_both(build, [0.5, -2.0], [1.0, 3.0])
    assert _close(got, want) and got[2] == [1.0, 3.0]


def test_a_composite_op_out_gets_the_tangent_seed_7840036():
    """Seed 7840036: ``tensordot(x, x, out=v)`` (a composite op; its out= write bypassed the hook) gave v
    no tangent: 0 where torch's is 9."""
    def build(T):
        def f(x):
            v = T.zeros((), dtype=T.float64)
            T.tensordot(x, x, out=v)
            return (v,)
        return f
    got, want = _jvp_both(build, [[1.0], [2.0], [-1.0]], [[0.5], [1.0], [2.0]])
    assert got == want == [6.0, 1.0]


def test_an_inplace_view_op_on_a_dual_seed_7840052():
    """Seed 7840052: ``x.as_strided_([3, 2], [0, 0])`` changes x's shape: its tangent is not written in place
    (a [5, 1] tangent cannot take the [3, 2] one), it is replaced."""
    def build(T):
        def f(x):
            x.as_strided_([3, 2], [1, 0])
            return (T.std_mean(x, True)[0],)
        return f
    got, want = _jvp_both(build, [[1.0], [2.0], [-1.0], [0.5], [3.0]], [[0.5], [1.0], [2.0], [-1.0], [1.5]])
    assert _close(got, want)


def test_make_dual_tangent_is_written_by_inplace_ops_as_torchs():
    """torch's forward AD writes the tangent given to make_dual (and torch.func.jvp's) in place."""
    for T, ad in ((torch, torch.autograd.forward_ad), (jitorch, fwd)):
        t = T.ones(3, dtype=T.float64)
        with ad.dual_level():
            d = ad.make_dual(T.ones(3, dtype=T.float64), t)
            d.mul_(2)
        assert t.tolist() == [2.0, 2.0, 2.0], T.__name__


def test_a_tangent_copied_in_from_another_dtype_takes_its_primals_dtype_seed_7840174():
    """Seed 7840174: a float64 tensor with no tangent takes a float32 input's in place. torch's tangent stays
    float32 (the source's, as is); jitorch's has the primal's dtype, with the same values."""
    def run(T):
        t0 = T.zeros(4, 3, dtype=T.float64)

        def f(x):
            v = t0.clone()
            v[::1] = x
            return v
        return T.func.jvp(f, (T.ones(4, 3),), (T.arange(12.0).reshape(4, 3),))

    (p, t), (tp, tt) = run(jitorch), run(torch)
    assert p.dtype == t.dtype == jitorch.float64 and tt.dtype == torch.float32
    assert t.tolist() == tt.tolist() == torch.arange(12.0).reshape(4, 3).tolist()


def test_an_inplace_op_reading_its_own_target_takes_the_old_tangent_seed_7870177():
    """Transform-fuzz seed 7870177: ``x.lerp_(c, x)`` (the weight is the target). Its tangent is that of
    ``x + x (c - x)``, ``t (1 + c - 2x)``, as jitorch's and central differences give; torch's in-place forward
    formula reads the weight's tangent after writing the target's (docs/differences-from-torch.md), and the
    fuzzer compares such programs with finite differences instead."""
    x, c, t = [0.5, -1.25], [2.0, 0.75], [1.0, -0.5]

    def build(T):
        def f(x):
            view = x.broadcast_to((-1,))
            x.lerp_(T.tensor(c, dtype=T.float64), x)
            return (view,)
        return f
    theirs, mine = _jvp_both(build, x, t)
    analytic = [ti * (1 + ci - 2 * xi) for xi, ci, ti in zip(x, c, t)]
    eps = 1e-6
    f = [lambda h, i=i: (x[i] + h * t[i]) * (1 + c[i] - (x[i] + h * t[i])) for i in range(2)]
    differences = [(fi(eps) - fi(-eps)) / (2 * eps) for fi in f]
    assert _close(mine[1], analytic) and max(abs(d - a) for d, a in zip(differences, analytic)) < 1e-6
    assert mine[0] == theirs[0] and not _close(theirs[1], analytic)


def test_a_write_through_a_view_reaches_a_base_tangent_of_another_dtype_seed_7872385():
    """Transform-fuzz seed 7872385: ``v2 = addr(v0, c, x)`` (float64 of float32 operands) then ``v2[:, ::1] =
    -0.75``: the tangent of ``v2`` kept its values. Its tangent was not laid out as ``v2`` (the float32 operand's
    dtype), so the view's tangent was no view of it and the write's zero reached only the view. The base's
    tangent is now copied into memory laid out as the base first, as for a base without one."""
    found = []
    for T in (torch, jitorch):
        def f(x):
            v2 = x + T.zeros(3, 3, dtype=T.float64)
            v2[:, ::1] = -0.75
            w = x + T.zeros(3, 3, dtype=T.float64)
            w[1:, 1] = 2.0
            return v2, w
        found.append([t.tolist() for t in T.func.jvp(f, (T.tensor([1.0, 2.0, 3.0]),), (T.tensor([0.5, 1.0, -1.0]),))[1]])
    assert found[1] == found[0]
    assert found[0][0] == [[0.0] * 3] * 3 and found[0][1][1] == [0.5, 0.0, -1.0]
