"""Tensor.grad_dtype (torch 2.13) against torch: the leaf-only attribute, backward casting incoming gradients to
it (before tensor hooks see them), None allowing any gradient dtype, torch's errors when assigning a gradient of another
dtype or changing grad_dtype under an existing gradient; compiled calls cast as eager (an input with a
grad_dtype runs eagerly, a captured parameter's change of grad_dtype retraces)."""

import pytest
import torch

import jitorch as jt
from tests.support import raises_as_torch


@pytest.mark.parametrize("T", [torch, jt], ids=["torch", "jitorch"])
def test_backward_casts_to_the_leafs_grad_dtype(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    assert x.grad_dtype is T.float32 and T.tensor([1, 2]).grad_dtype is T.int64
    x.grad_dtype = T.float64
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.dtype is T.float64 and x.grad.tolist() == [6.0, 6.0]
    u = T.tensor([1.0, 2.0], requires_grad=True)
    u.grad_dtype = T.float16
    seen = []
    u.register_hook(lambda g: seen.append(g.dtype))
    (u.double() * 3).sum().backward()
    assert u.grad.dtype is T.float16 and seen == [T.float16]  # cast before the hook sees it
    z = T.tensor([1.0, 2.0], requires_grad=True)
    z.grad_dtype = None
    z.grad = T.ones(2, dtype=T.float64)
    assert z.grad_dtype is None and z.grad.dtype is T.float64


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("call", [
    lambda T: (T.ones(2, requires_grad=True) * 2).grad_dtype,
    lambda T: setattr(T.ones(2, requires_grad=True) * 2, "grad_dtype", T.float16),
    lambda T: setattr(T.ones(2, requires_grad=True), "grad", T.ones(2, dtype=T.float64)),
    lambda T: setattr(T.ones(2, dtype=T.bfloat16, requires_grad=True), "grad", T.ones(2)),
    lambda T: setattr(T.ones(2, dtype=T.float64, requires_grad=True), "grad", T.ones(2, dtype=T.int64)),
])
def test_grad_dtype_errors_are_torchs(call):
    raises_as_torch(call)


@pytest.mark.parametrize("dtype", ["float16", "int64", "bfloat16"])
def test_changing_grad_dtype_under_a_gradient_raises_as_torch(dtype):
    def call(T):
        u = T.ones(2, requires_grad=True)
        u.grad_dtype = getattr(T, dtype)
        u.grad = T.ones(2, dtype=getattr(T, dtype))
        u.grad_dtype = T.float64
    raises_as_torch(call)


def test_compiled_backward_casts_as_eager():
    def step(x):
        (x * 3).sum().backward()
        return x.grad
    x = jt.tensor([1.0, 2.0], requires_grad=True)
    x.grad_dtype = jt.float64
    assert jt.compile(step)(x).dtype is jt.float64  # (an input with a grad_dtype: the call runs eagerly)
    w = jt.tensor([1.0, 2.0], requires_grad=True)
    fn = jt.compile(lambda a: ((w * a).sum().backward(), a * 1)[1])
    a = jt.tensor([3.0, 4.0])
    fn(a)
    assert w.grad.dtype is jt.float32
    w.grad = None
    w.grad_dtype = jt.float16  # a captured parameter's new grad_dtype: traced again
    fn(a)
    fn(a)
    assert w.grad.dtype is jt.float16 and w.grad.tolist() == [6.0, 8.0]
