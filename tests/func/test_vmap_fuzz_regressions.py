"""vmap failures the transform fuzzer found (tests/fuzz/transforms.py), each against the per-sample loop and
torch.func.vmap, with the path that ran (`batching.STATS`)."""

import warnings

import pytest
import torch

import jitorch
from jitorch.func import batching


def test_a_dim_of_a_zero_dim_sample_is_not_the_batch_dim_seed_7840825():
    """Seed 7840825: ``log_softmax(x, -1)`` of 0-d samples ran over the batch dimension (-1 of the physical
    [B] tensor): -2.14 where each sample's is 0. A 0-d sample with a ``dim`` now runs per sample."""
    xs = [0.5, -1.0, 2.0]
    want = torch.func.vmap(lambda x: x.log_softmax(-1))(torch.tensor(xs))
    before = batching.STATS["per_sample"]["log_softmax"]
    got = jitorch.func.vmap(lambda x: x.log_softmax(-1))(jitorch.tensor(xs))
    assert got.tolist() == want.tolist() == [0.0, 0.0, 0.0]
    assert [jitorch.tensor(x).log_softmax(-1).item() for x in xs] == got.tolist()
    assert batching.STATS["per_sample"]["log_softmax"] == before + 1


def test_stacking_zero_dim_samples_stays_batched():
    """The fix above keeps ops whose ``dim`` counts the result's dimensions batched: ``stack`` and
    ``unsqueeze`` of 0-d samples at 0 and -1."""
    xs = [0.5, -1.0, 2.0]
    for dim in (0, -1):
        f = lambda x: jitorch.stack([x, x * 2], dim).unsqueeze(dim)
        want = torch.func.vmap(lambda x: torch.stack([x, x * 2], dim).unsqueeze(dim))(torch.tensor(xs))
        before = dict(batching.STATS["per_sample"])
        got = jitorch.func.vmap(f)(jitorch.tensor(xs))
        assert got.tolist() == want.tolist()
        assert batching.STATS["per_sample"]["stack"] == before.get("stack", 0)
        assert batching.STATS["per_sample"]["unsqueeze"] == before.get("unsqueeze", 0)


def _divide_in_place(T):
    def f(x):
        y = x * 1
        y.div_(T.tensor(1.25))
        y.div_(x + 3, rounding_mode="floor")
        return y.square_() + x.div_(4)
    return f


def test_an_in_place_composite_runs_batched_under_vmap_jvp_and_grad_seed_7870054():
    """Seed 7870054: ``x.div_(t)`` under vmap raised TypeError ("'NoneType' object is not callable"): the
    registry calls a composite op's body before the hooks, an in-place composite's after them, and vmap's hook
    asked ``div``'s meta (a composite has none). Its body now runs through the hook (``div`` by the batched
    ``true_divide`` and ``floor_divide``); against torch.func and the per-sample loop."""
    x = torch.tensor([[0.5, -1.25], [2.0, 3.5], [-0.75, 1.0]], dtype=torch.float64)
    tangent = torch.tensor([[1.0, -2.0], [0.5, 0.25], [3.0, 1.5]], dtype=torch.float64)
    before = dict(batching.STATS["batched"])
    got = jitorch.func.vmap(_divide_in_place(jitorch))(jitorch.tensor(x.numpy()))
    assert batching.STATS["batched"]["true_divide"] > before.get("true_divide", 0)
    want = torch.func.vmap(_divide_in_place(torch))(x.clone())
    loop = [_divide_in_place(jitorch)(jitorch.tensor(row.numpy())).tolist() for row in x]
    assert got.tolist() == want.tolist() == loop
    _, got = jitorch.func.jvp(_divide_in_place(jitorch), (jitorch.tensor(x.numpy()),),
                              (jitorch.tensor(tangent.numpy()),))
    _, want = torch.func.jvp(_divide_in_place(torch), (x.clone(),), (tangent,))
    assert got.tolist() == want.tolist()

    def loss(T):
        return lambda x: (x * 1).div_(T.tensor(1.25)).square_().sum()
    got = jitorch.func.vmap(jitorch.func.grad(loss(jitorch)))(jitorch.tensor(x.numpy()))
    want = torch.func.vmap(torch.func.grad(loss(torch)))(x.clone())
    torch.testing.assert_close(torch.tensor(got.numpy()), want, rtol=1e-15, atol=0)


def test_a_mask_of_a_size_zero_dim_indexes_per_sample_where_torchs_vmap_refuses_seed_7840848():
    """Seeds 7840848, 7870115: ``v[v > 2]`` with ``v`` of a dim of size 0. Each sample's call runs (an empty
    result) in both libraries; torch's vmap raises IndexError ("The shape of the mask [3, 3, 0] at index 1 does
    not match the shape of the indexed tensor [3, 3, 0] at index 2"), its batching rule's error, not the
    program's. jitorch's vmap gives the per-sample loop's results stacked; the fuzzer reads torch's error as its
    vmap's limit (`transforms.VMAP_LIMITS`) and compares with the loop."""
    def f(v):
        return v[v > 2]
    for shape, in_dims in (((3, 3, 0), 0), ((3, 4, 0, 2), 1)):
        loops = []
        for T in (torch, jitorch):
            x = T.zeros(shape)
            loops.append([tuple(f(x.select(in_dims, i)).shape) for i in range(shape[in_dims])])
        assert loops[0] == loops[1] == [(0,)] * shape[in_dims]
        with pytest.raises(IndexError, match="does not match the shape of the indexed tensor"):
            torch.func.vmap(f, in_dims=in_dims)(torch.zeros(shape))
        assert tuple(jitorch.func.vmap(f, in_dims=in_dims)(jitorch.zeros(shape)).shape) == (shape[in_dims], 0)


def test_as_strided_in_place_on_a_batched_tensor_changes_each_samples_geometry_seed_7870731():
    """Seed 7870731: ``x.as_strided_([2, 3], [3, 1])`` then ``x.tile((2, 1))`` under vmap. Each sample's call
    gives (4, 3) and (2, 3); jitorch's vmap stacks those. torch's vmap (its fallback for ``as_strided_``) leaves
    the batched tensor as it was and gives (3, 10, 4) and (3, 5, 4) without an error; the fuzzer compares such
    programs with the loop alone (`transforms.TORCH_VMAP_WRONG`)."""
    def f(x):
        x.as_strided_([2, 3], [3, 1])
        return x.tile((2, 1)), x
    values = torch.arange(60.0).reshape(3, 5, 4)
    loop = [f(jitorch.tensor(values[i].numpy().copy())) for i in range(3)]
    got = jitorch.func.vmap(f)(jitorch.tensor(values.numpy().copy()))
    for k in range(2):
        assert got[k].tolist() == [sample[k].tolist() for sample in loop]
    assert [tuple(t.shape) for t in got] == [(3, 4, 3), (3, 2, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.func.vmap(f)(values.clone())
    assert [tuple(t.shape) for t in theirs] == [(3, 10, 4), (3, 5, 4)]
