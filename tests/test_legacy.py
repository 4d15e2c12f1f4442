"""Legacy tensor types (jitorch.FloatTensor, ...) and Tensor.type(), against torch."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.legacy import NAMES


def test_the_same_types_as_torch():
    legacy = sorted(n for n in dir(torch) if n.endswith("Tensor") and n != "Tensor" and n[0].isupper())
    assert sorted(NAMES) == legacy
    assert sorted(n for n in dir(jt.cuda) if n in NAMES) == legacy
    for name in legacy:
        ours, theirs = getattr(jt, name), getattr(torch, name)
        assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
        assert (ours.is_cuda, getattr(jt.cuda, name).is_cuda) == (False, True)
        assert repr(ours) == repr(theirs).replace("torch", "jitorch")
        assert not issubclass(ours, jt.Tensor)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16", "bfloat16", "uint8", "int8"])
def test_isinstance_as_torch(dtype):
    x, y = jt.zeros(2, dtype=getattr(jt, dtype)), torch.zeros(2, dtype=getattr(torch, dtype))
    for name in NAMES:
        assert isinstance(x, getattr(jt, name)) == isinstance(y, getattr(torch, name)), name
        assert not isinstance(x, getattr(jt.cuda, name))
    assert x.type() == y.type().replace("torch", "jitorch")


def test_a_parameter_is_an_instance_of_its_legacy_type():
    assert isinstance(jt.nn.Parameter(jt.zeros(2)), jt.FloatTensor)


@pytest.mark.parametrize("name,args", [
    ("FloatTensor", ([1, 2],)), ("LongTensor", ([1.5, 2],)), ("BoolTensor", ([1, 0],)), ("FloatTensor", ()),
    ("FloatTensor", ((2, 3),)), ("FloatTensor", ([[1, 2]],)), ("DoubleTensor", (np.array([1, 2]),)),
    ("FloatTensor", ([],)), ("HalfTensor", ([1],)), ("FloatTensor", ([True],)),
], ids=str)
def test_construction_from_data_as_torch(name, args):
    ours, theirs = getattr(jt, name)(*args), getattr(torch, name)(*args)
    assert ours.tolist() == theirs.tolist() and ours.type() == theirs.type().replace("torch", "jitorch")


@pytest.mark.parametrize("args,kwargs", [((2, 3), {}), ((jt.Size([2]),), {}), ((2, 0), {}), ((), {"size": (4,)}),
                                         ((1, 2, 3), {"device": "cpu"})], ids=str)
def test_construction_from_sizes_as_torch(args, kwargs):
    theirs = torch.IntTensor(*[torch.Size(a) if isinstance(a, jt.Size) else a for a in args], **kwargs)
    ours = jt.IntTensor(*args, **kwargs)
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.dtype is jt.int32


def test_construction_from_a_tensor_is_an_alias():
    a = jt.ones(2, requires_grad=True)
    b = jt.FloatTensor(a)
    assert b is not a and b.data_ptr() == a.data_ptr() and b.requires_grad
    b.sum().backward()
    assert a.grad.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("name,args,kwargs", [
    ("FloatTensor", (2.5,), {}), ("LongTensor", (True,), {}), ("FloatTensor", ("a",), {}),
    ("LongTensor", (-1,), {}), ("FloatTensor", ([[1], [2, 3]],), {}), ("FloatTensor", (2,), {"device": "cuda"}),
    ("FloatTensor", ([1], [2]), {}),
], ids=str)
def test_construction_errors_as_torch(name, args, kwargs):
    with pytest.raises(Exception) as theirs:
        getattr(torch, name)(*args, **kwargs)
    with pytest.raises(theirs.type):
        getattr(jt, name)(*args, **kwargs)


def test_construction_from_a_tensor_of_another_dtype_raises():
    with pytest.raises(TypeError, match="expected a float tensor on cpu \\(got a long int tensor on cpu\\)"):
        jt.FloatTensor(jt.tensor([1, 2]))


@pytest.mark.parametrize("target", ["torch.LongTensor", "jitorch.DoubleTensor", "torch.BoolTensor"])
def test_type_casts_as_torch(target):
    ours = jt.tensor([0.0, 1.5]).type(target)
    theirs = torch.tensor([0.0, 1.5]).type(target.replace("jitorch", "torch"))
    assert ours.tolist() == theirs.tolist() and ours.type() == theirs.type().replace("torch", "jitorch")
    as_class = jt.tensor([0.0, 1.5]).type(jt.LongTensor)
    assert as_class.tolist() == torch.tensor([0.0, 1.5]).type(torch.LongTensor).tolist()


@pytest.mark.parametrize("target", ["bogus", "torch.FooTensor", 3, "torch.float16", "float32"])
def test_type_errors_as_torch(target):
    with pytest.raises(Exception) as theirs:
        torch.zeros(2).type(target)
    with pytest.raises(theirs.type, match=str(theirs.value)):
        jt.zeros(2).type(target)


def test_tensor_is_predicates_as_torch():
    ours, theirs = jt.zeros(2), torch.zeros(2)
    for name in [n for n in dir(theirs) if n.startswith("is_") and not callable(getattr(theirs, n))]:
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in ("is_conj", "is_neg", "is_pinned", "is_shared", "is_distributed"):
        assert getattr(ours, name)() == getattr(theirs, name)(), name
    assert ours.is_set_to(ours) and ours.is_set_to(ours[:]) and not ours.is_set_to(ours.clone())
    assert ours.is_same_size(jt.ones(2)) and not ours.is_same_size(jt.ones(3))
    assert jt.tensor([0.5]).is_nonzero() and not jt.tensor([0]).is_nonzero()
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        ours.is_nonzero()
