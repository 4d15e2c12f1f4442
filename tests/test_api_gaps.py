"""API gaps closed toward ``import jitorch as torch`` (docs/api-coverage.md's "Missing"), each against torch: values,
gradients, errors and, where the call can run in a graph, compiled == eager. Covers einsum's sublist form,
nuclear_norm/frobenius_norm, renorm_/index_reduce_, resize/resize_as, as_subclass, __nonzero__/__div__,
storage()/storage_type(), nn.init.sparse_, linear_cross_entropy/LinearCrossEntropyLoss, svd_lowrank/pca_lowrank."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch as jt
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, normal, same_error
from tests.support import assert_close, raises_as_torch


def lib(F):
    """The library (torch or jitorch) whose ``nn.functional`` the oracle passed."""
    return torch if F is TF else jt


# einsum's sublist form -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes,args", [
    ([(3, 4), (4, 5)], ((0, [0, 1]), (1, [1, 2]), [0, 2])),  # a product
    ([(3, 4), (4, 5)], ((0, [0, 1]), (1, [1, 2]))),  # no output list: the labels seen once, sorted
    ([(2, 3, 4), (4, 5)], ((0, [..., 0, 1]), (1, [1, 2]), [..., 2])),  # ellipsis in operand and output lists
    ([(4, 4)], ((0, [30, 30]),)),  # a trace, a lower-case label (26 and up)
    ([(3, 4)], ((0, [0, 51]), [51, 0])),  # a transpose by the highest label
])
def test_einsum_sublist_form_is_torchs_equation(shapes, args):
    def call(F, *xs):
        flat = []
        for a in args:
            flat += [xs[a[0]], a[1]] if isinstance(a, tuple) else [a]
        return lib(F).einsum(*flat)
    check(call, *(normal(shape, i) for i, shape in enumerate(shapes)), atol=1e-12, rtol=1e-12)


def test_einsum_sublist_compiles_to_the_equations_graph():
    a, b = jt.tensor(normal((3, 4), 3)), jt.tensor(normal((4, 5), 4))
    fn = jt.compile(lambda a, b: jt.einsum(a, [0, 1], b, [1, 2], [0, 2]), fullgraph=True)
    lowered = fn.lower(a, b)
    assert [n.op.name for n in lowered.graph.nodes].count("einsum") == 1
    assert_close(fn(a, b), jt.einsum("ab,bc->ac", a, b).numpy(), atol=0, rtol=0)


@pytest.mark.parametrize("label", [52, -1])
def test_einsum_sublist_label_out_of_range_raises_as_torch(label):
    same_error(lambda F, x: lib(F).einsum(x, [0, label]), np.ones((2, 2)))


# deprecated norms ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda T, x: T.nuclear_norm(x), lambda T, x: T.nuclear_norm(x, True), lambda T, x: T.nuclear_norm(x, (0, 2)),
    lambda T, x: T.nuclear_norm(x, [2, 1], keepdim=True), lambda T, x: T.frobenius_norm(x, 1),
    lambda T, x: T.frobenius_norm(x, (0, 2), True), lambda T, x: T.frobenius_norm(x, ())])
def test_nuclear_and_frobenius_norm_match_torch_with_gradients(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda F, x: call(lib(F), x), normal((2, 3, 4), 5), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("call", [lambda T, x: T.nuclear_norm(x, (0,)), lambda T, x: T.frobenius_norm(x, (0, 1, 2)),
                                  lambda T, x: T.nuclear_norm(x[0, 0])])
def test_deprecated_norms_raise_as_torch(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_error(lambda F, x: call(lib(F), x), normal((2, 3, 4), 6))


# in-place composites ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_inplace_matches_torch_with_gradients(reduce, include_self):
    index = np.array([0, 3, 0, 1])

    def call(F, x, src):
        y = x * 1  # (a leaf that requires grad cannot be written in place)
        out = y.index_reduce_(0, lib(F).tensor(index), src, reduce, include_self=include_self)
        assert out is y
        return y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's beta warning)
        check(call, normal((4, 3), 7), normal((4, 3), 8), atol=1e-12, rtol=1e-12)


def test_renorm_inplace_matches_torch_with_gradients():
    def call(F, x):
        y = x * 1
        assert y.renorm_(2, 0, 1.5) is y
        return y
    check(call, normal((3, 4), 9), atol=1e-12, rtol=1e-12)


def test_inplace_composite_without_rule_records_its_body_and_a_copy():
    """index_reduce_ has no derivative of its own: the write is the body's result copied in, so the graph holds
    the body's nodes and a copy_ node (not a node of index_reduce that backward could not run). renorm_, which
    has torch's rule (`own_derivative`, tests/autograd/test_grads44.py), records its own node."""
    x = jt.tensor(normal((3, 4), 10), requires_grad=True)
    y = x * 1
    y.index_reduce_(0, jt.tensor([2, 0]), jt.tensor(normal((2, 4), 11)), "amax")
    assert "Copy" in type(y.grad_fn).__name__ or "copy" in y.grad_fn.name().lower()
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    z = x * 1
    z.renorm_(2, 0, 1.0)
    assert "renorm" in z.grad_fn.name().lower()


def test_index_reduce_inplace_without_grad_writes_self_and_bumps_its_version():
    x = jt.ones(3, 2)
    version = x._version
    x.index_reduce_(0, jt.tensor([2]), jt.full((1, 2), 5.0), "amax")
    assert x._version > version
    assert x.tolist() == [[1.0, 1.0], [1.0, 1.0], [5.0, 5.0]]


# Tensor protocol and legacy methods -------------------------------------------------------------------------

def test_nonzero_and_div_dunders_are_torchs():
    for T in (torch, jt):
        x = T.tensor([1.0, 2.0, 4.0])
        assert T.tensor([3.0]).__nonzero__() is True and T.tensor([0.0]).__nonzero__() is False
        assert x.__div__(2).tolist() == [0.5, 1.0, 2.0]
        assert x.__rdiv__(2).tolist() == [2.0, 1.0, 0.5]
        y = x.clone()
        y.__idiv__(2)
        assert y.tolist() == [0.5, 1.0, 2.0]


def test_resize_and_resize_as_are_differentiable_reshapes_with_torchs_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda F, x: x.resize(3, 2), normal((2, 3), 11))
    for T in (torch, jt):
        x = T.arange(6.0)
        with pytest.warns(UserWarning, match="non-inplace resize_as is deprecated"):
            assert tuple(x.resize_as(T.ones(2, 3)).shape) == (2, 3)


def test_resize_to_another_number_of_elements_raises_as_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_error(lambda F, x: x.resize(4, 2), normal((2, 3), 12))


def test_as_subclass_shares_memory_and_history():
    class Marked(jt.Tensor):
        pass
    x = jt.tensor([1.0, 2.0], requires_grad=True)
    m = (x * 1).as_subclass(Marked)
    assert type(m) is Marked and m.requires_grad
    (m * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    y = jt.zeros(2)
    y.as_subclass(Marked)[0] = 7
    assert y.tolist() == [7.0, 0.0]
    with pytest.raises(TypeError, match="does not inherit from Tensor"):
        y.as_subclass(int)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_storage_is_a_typed_view_of_the_whole_memory(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = (np.arange(12) % 3).astype(dtype)
        t, j = torch.tensor(base).view(3, 4)[1:, 1:], jt.tensor(base).view(3, 4)[1:, 1:]
        ts, js = t.storage(), j.storage()
        assert js.size() == len(js) == ts.size() == 12
        assert js.data_ptr() == j._base.data_ptr() and js.data_ptr() != j.data_ptr()
        assert js.tolist() == ts.tolist() and js[-1] == ts[-1] and type(js[0]) is type(ts[0])
        assert js.nbytes() == ts.nbytes() and js.element_size() == ts.element_size()
        assert js.dtype is getattr(jt, dtype) and js.device.type == "cpu"
        assert js.pickle_storage_type() == ts.pickle_storage_type()
        assert j.storage_type().__name__ == t.storage_type().__name__ and isinstance(js, j.storage_type())
        js[5], ts[5] = 1, 1
        assert j.tolist() == t.tolist()
        assert jt.tensor([], dtype=j.dtype).set_(js).tolist() == js.tolist()


def test_storage_of_uint16_has_no_legacy_type_and_refuses_slices_and_far_indices():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert jt.ones(2, dtype=jt.uint16).storage_type() is None is torch.ones(2, dtype=torch.uint16).storage_type()
        for T in (torch, jt):
            s = T.arange(3.0).storage()
            with pytest.raises(RuntimeError, match="slices are only supported"):
                s[0:2]
            with pytest.raises(IndexError, match="index 3 out of range for storage of size 3"):
                s[3]
        with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
            jt.ones(1).storage()


# nn.init.sparse_ ---------------------------------------------------------------------------------------------

def test_sparse_init_zeroes_the_fraction_of_each_column_and_draws_the_rest():
    w = jt.empty(40, 6)
    jt.manual_seed(3)
    assert jt.nn.init.sparse_(w, 0.3, std=0.5) is w
    zeros = (w == 0).sum(0).tolist()
    assert zeros == [12] * 6  # ceil(0.3 * 40) per column, as torch's
    assert 0.3 < w[w != 0].std().item() < 0.7
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        jt.nn.init.sparse_(jt.empty(2, 2, 2), 0.1)


# linear_cross_entropy ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes,target,kwargs", [
    (((4, 5), (3, 5), None), np.array([0, 2, 1, -100]), {}),
    (((4, 5), (3, 5), (3,)), np.array([0, 2, 1, 1]), {"reduction": "none", "label_smoothing": 0.1}),
    (((5,), (3, 5), None), np.array(2), {"ignore_index": 2}),
    (((4, 5), (3, 2, 5), (3, 2)), np.array([[0, 1], [2, 2], [1, 0], [0, 0]]), {"reduction": "sum"}),
    (((4, 5), (3, 5), None), np.full((4, 3), 1 / 3), {}),
])
def test_linear_cross_entropy_matches_torch_with_gradients(shapes, target, kwargs):
    arrays = [normal(s, 20 + i) for i, s in enumerate(shapes) if s is not None]

    def call(F, x, w, *b):
        return F.linear_cross_entropy(x, w, lib(F).tensor(target), linear_bias=b[0] if b else None, **kwargs)
    check(call, *arrays, atol=1e-12, rtol=1e-12, compiled=True)


@pytest.mark.parametrize("x,w,target,kwargs", [
    ((4, 5, 2), (3, 5), np.zeros(4, np.int64), {}),
    ((4, 5), (3, 6), np.zeros(4, np.int64), {}),
    ((5,), (3, 2, 5), np.zeros((), np.int64), {}),
    ((4, 5), (3, 5), np.full((4, 3), 1 / 3), {"ignore_index": 1}),
])
def test_linear_cross_entropy_errors_are_torchs(x, w, target, kwargs):
    same_error(lambda F, a, b: F.linear_cross_entropy(a, b, lib(F).tensor(target), **kwargs), np.ones(x),
               np.ones(w))


def test_linear_cross_entropy_loss_module_matches_torch_with_its_weights():
    torch.manual_seed(0)
    tm = torch.nn.LinearCrossEntropyLoss(5, 3, out_features=(2,), bias=True, label_smoothing=0.05)
    jm = jt.nn.LinearCrossEntropyLoss(5, 3, out_features=(2,), bias=True, label_smoothing=0.05)
    jm.load_state_dict({k: jt.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x, target = normal((4, 5), 30).astype(np.float32), np.array([[0, 1], [2, 2], [1, 0], [0, 0]])
    t_loss, j_loss = tm(torch.tensor(x), torch.tensor(target)), jm(jt.tensor(x), jt.tensor(target))
    assert_close(j_loss, t_loss.detach().numpy(), atol=1e-6, rtol=1e-6)
    t_loss.backward()
    j_loss.backward()
    assert_close(jm.linear.weight.grad, tm.linear.weight.grad.numpy(), atol=1e-6, rtol=1e-6)
    assert tuple(jm.linear.weight.shape) == (6, 5)
    with pytest.raises(RuntimeError, match=r"expected weight shape to be \(3,\), got \(2,\)"):
        jt.nn.LinearCrossEntropyLoss(5, 3, weight=jt.ones(2))


# svd_lowrank / pca_lowrank ------------------------------------------------------------------------------------

def _with_random_matrix(monkeypatch, R):
    """torch's and jitorch's lowrank functions draw ``R`` (their one random matrix) instead of randn's."""
    monkeypatch.setattr(torch, "randn", lambda *a, **k: torch.tensor(R))
    monkeypatch.setattr(jt, "randn", lambda *a, **k: jt.tensor(R))


def _aligned(u, ref):
    """``u`` with each column's sign flipped to agree with ``ref``'s (singular vectors are defined up to sign)."""
    signs = np.sign(np.sum(u * ref, axis=-2, keepdims=True))
    return u * np.where(signs == 0, 1, signs)


@pytest.mark.parametrize("name", ["svd_lowrank", "pca_lowrank"])
@pytest.mark.parametrize("shape,q", [((8, 6), 4), ((6, 8), 4), ((2, 7, 5), 3)])
def test_lowrank_is_torchs_given_the_same_random_matrix(monkeypatch, name, shape, q):
    A = normal(shape, 40)
    _with_random_matrix(monkeypatch, normal((min(shape[-2:]), q), 41))
    t_out = getattr(torch, name)(torch.tensor(A), q=q)
    j_out = getattr(jt, name)(jt.tensor(A), q=q)
    assert_close(j_out[1], t_out[1].numpy(), atol=1e-12, rtol=1e-12)
    for j, t in (j_out[0], t_out[0]), (j_out[2], t_out[2]):
        assert_close(jt.tensor(_aligned(j.numpy(), t.numpy())), t.numpy(), atol=1e-10, rtol=1e-10)


def test_svd_lowrank_recovers_a_low_rank_matrix_and_is_differentiable():
    jt.manual_seed(0)
    A = jt.tensor(normal((9, 3), 42) @ normal((3, 7), 43), requires_grad=True)
    M = jt.tensor(normal((1, 7), 44))
    U, S, V = jt.svd_lowrank(A, q=5, M=M)
    assert_close(U @ jt.diag(S) @ V.mT, (A - M).detach().numpy(), atol=1e-10, rtol=1e-10)
    assert_close(U.mT @ U, np.eye(5), atol=1e-10, rtol=0)
    S[:3].sum().backward()  # the nuclear norm's gradient: the sum of u v^T over the 3 nonzero values
    assert_close(A.grad, (U[:, :3] @ V[:, :3].mT).detach().numpy(), atol=1e-8, rtol=1e-8)


def test_pca_lowrank_errors_are_torchs():
    for T in (torch, jt):
        with pytest.raises(ValueError, match=r"q\(=5\) must be non-negative integer and not greater than min"):
            T.pca_lowrank(T.ones(4, 3), q=5)
        with pytest.raises(ValueError, match=r"niter\(=-1\) must be non-negative integer"):
            T.pca_lowrank(T.ones(4, 3), niter=-1)


# hash_tensor ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values,dtype,kwargs", [
    ([[1.5, -2.0], [3.0, 4.0]], "float32", {}), ([[1.5, -2.0], [3.0, 4.0]], "float32", {"dim": 1}),
    ([[1.5, -2.0], [3.0, 4.0]], "float64", {"dim": 0, "keepdim": True}), ([[1.5, -2.0]], "float32", {"dim": []}),
    ([float("nan"), -0.0, float("-nan")], "float32", {}), ([-1.0, 0.25], "float16", {}), ([1.0, 3.0], "bfloat16", {}),
    ([-1, 7, 255], "int64", {}), ([-1, 5], "int8", {}), ([255, 1], "uint8", {}), ([True, False, True], "bool", {}),
    (np.zeros((3, 0)), "float32", {"dim": 0}), (5.0, "float32", {"dim": 0}),
])
def test_hash_tensor_xors_the_64_bit_patterns_as_torch(values, dtype, kwargs):
    t, j = torch.tensor(values, dtype=getattr(torch, dtype)), jt.tensor(values, dtype=getattr(jt, dtype))
    expected, got = t.hash_tensor(**kwargs), j.hash_tensor(**kwargs)
    assert got.dtype is jt.uint64 and tuple(got.shape) == tuple(expected.shape)
    assert got.tolist() == expected.tolist() == jt.hash_tensor(j, **kwargs).tolist()


@pytest.mark.parametrize("call", [
    lambda T: T.ones(2).hash_tensor(mode=1), lambda T: T.zeros(0, 3).hash_tensor(0), lambda T: T.zeros(0).hash_tensor(),
    lambda T: T.ones(2, dtype=T.uint16).hash_tensor(), lambda T: T.hash_tensor(T.ones(2), out=T.empty((), dtype=T.int64)),
])
def test_hash_tensor_errors_are_torchs(call):
    raises_as_torch(call)


def test_hash_tensor_has_no_gradient_and_compiles_as_a_step_equal_to_eager():
    x = jt.tensor([[1.0, 2.0], [3.0, 5.0]], requires_grad=True)
    assert not x.hash_tensor().requires_grad
    fn = jt.compile(lambda x: (x * 2).hash_tensor(1), fullgraph=True)
    assert fn(x.detach()).tolist() == (x.detach() * 2).hash_tensor(1).tolist()


def test_module_load_copies_or_assigns_as_torchs():
    for T in (torch, jt):
        p, state = T.zeros(3, requires_grad=True), T.tensor([1.0, 2.0, 3.0], requires_grad=True)
        with T.no_grad():
            copied = p.module_load(state)
        assert copied is not p and not copied.requires_grad and p.tolist() == [1.0, 2.0, 3.0]
        assigned = p.module_load(state, assign=True)
        assert assigned is not state and not assigned.requires_grad
        assigned.add_(1)  # (detached: the same memory as the state's tensor)
        assert state.tolist() == [2.0, 3.0, 4.0]


# lobpcg ----------------------------------------------------------------------------------------------------------

def _spd(m, key):
    a = normal((m, m), key)
    return a @ a.T + m * np.eye(m)


@pytest.mark.parametrize("kwargs", [{}, {"largest": False}, {"method": "basic"}, {"B": True}, {"n": 3}])
def test_lobpcg_is_torchs_from_the_same_start(kwargs):
    A, B = _spd(12, 50), _spd(12, 51)
    start = normal((12, kwargs.get("n", 2)), 52)
    out = []
    for T in (torch, jt):
        kw = {key: v for key, v in kwargs.items() if key not in ("B", "n")}
        E, U = T.lobpcg(T.tensor(A), k=2, B=T.tensor(B) if kwargs.get("B") else None, X=T.tensor(start), **kw)
        out.append((E.numpy(), U.numpy()))
    (te, tu), (je, ju) = out
    np.testing.assert_allclose(je, te, rtol=1e-12)
    np.testing.assert_allclose(ju * np.sign((ju * tu).sum(0)), tu, atol=1e-10)
    w = np.linalg.eigvalsh(A) if not kwargs.get("B") else None
    if w is not None:
        np.testing.assert_allclose(je, w[:2] if kwargs.get("largest") is False else w[::-1][:2], rtol=1e-9)


def test_lobpcg_gradient_is_torchs_formula_and_batches_run_each_matrix():
    A, start = _spd(10, 53), normal((10, 2), 54)
    grads = []
    for T in (torch, jt):
        a = T.tensor(A, requires_grad=True)
        E, U = T.lobpcg(a, X=T.tensor(start))
        (E.sum() + (U ** 2 * T.arange(2.0)).sum()).backward()
        grads.append(a.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], atol=1e-12)
    batch = np.stack([_spd(9, 55), _spd(9, 56)])
    jt.manual_seed(0)
    E, U = jt.lobpcg(jt.tensor(batch), k=2)
    assert tuple(E.shape) == (2, 2) and tuple(U.shape) == (2, 9, 2)
    np.testing.assert_allclose(E.numpy(), np.linalg.eigvalsh(batch)[:, ::-1][:, :2], rtol=1e-9)


def test_lobpcg_refuses_too_many_eigenpairs_and_calls_the_tracker():
    for T in (torch, jt):
        with pytest.raises(ValueError, match=r"number of A rows \(=5\) is smaller than 3 x the number of requested"):
            T.lobpcg(T.eye(5, dtype=T.float64), k=2)
    steps = []
    jt.lobpcg(jt.tensor(_spd(12, 57)), X=jt.tensor(normal((12, 1), 58)), tracker=lambda w: steps.append(
        w.ivars["istep"]))
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 1
