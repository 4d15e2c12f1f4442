"""Sequential, ModuleList, ModuleDict, ParameterList and ParameterDict."""

from __future__ import annotations

from collections import OrderedDict

import pytest

import jitorch as jt
from jitorch import nn
from jitorch.nn import Parameter


def test_sequential_runs_in_order_and_indexes():
    seq = nn.Sequential(nn.Identity(), nn.ReLU(), nn.Tanh())
    assert len(seq) == 3 and isinstance(seq[1], nn.ReLU) and isinstance(seq[-1], nn.Tanh)
    assert seq(jt.tensor([-1.0, 0.5])).tolist() == pytest.approx([0.0, 0.46211716])
    sliced = seq[1:]
    assert isinstance(sliced, nn.Sequential) and list(sliced._modules) == ["1", "2"]
    assert [type(m).__name__ for m in seq] == ["Identity", "ReLU", "Tanh"]
    seq.append(nn.Sigmoid())
    assert list(seq._modules) == ["0", "1", "2", "3"]
    del seq[0]
    assert list(seq._modules) == ["0", "1", "2"] and isinstance(seq[0], nn.ReLU)
    seq[0] = nn.GELU()
    assert isinstance(seq[0], nn.GELU)
    seq.insert(1, nn.SiLU())
    assert [type(m).__name__ for m in seq] == ["GELU", "SiLU", "Tanh", "Sigmoid"]
    assert isinstance(seq.pop(1), nn.SiLU) and len(seq) == 3
    assert len(seq + nn.Sequential(nn.ReLU())) == 4


def test_sequential_from_ordered_dict():
    seq = nn.Sequential(OrderedDict([("lin", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert [n for n, _ in seq.named_parameters()] == ["lin.weight", "lin.bias"]
    assert seq.act is seq[1]


@pytest.mark.parametrize("container", [nn.Sequential(nn.ReLU()), nn.ModuleList([nn.ReLU()])])
def test_index_out_of_range(container):
    with pytest.raises(IndexError, match="index 3 is out of range"):
        container[3]
    with pytest.raises(IndexError, match="index -3 is out of range"):
        container[-3]


def test_sequential_rejects_non_modules():
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        nn.Sequential(3)


def test_module_list():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and [n for n, _ in layers.named_parameters()][-1] == "2.bias"
    layers.append(nn.ReLU())
    layers.extend([nn.Tanh()])
    layers += [nn.Sigmoid()]
    assert len(layers) == 6 and isinstance(layers[-1], nn.Sigmoid)
    assert isinstance(layers[1:3], nn.ModuleList) and list(layers[1:3]._modules) == ["0", "1"]
    assert isinstance(layers.pop(0), nn.Linear) and list(layers._modules) == [str(i) for i in range(5)]
    layers.insert(0, nn.Identity())
    assert isinstance(layers[0], nn.Identity)
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, but got ReLU"):
        layers.extend(nn.ReLU())


def test_module_list_repr_folds_repeats():
    layers = nn.ModuleList([nn.Linear(2, 2)] * 3 + [nn.ReLU(), nn.ReLU(), nn.Linear(1, 1)])
    assert repr(layers) == (
        "ModuleList(\n"
        "  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)\n"
        "  (3-4): 2 x ReLU()\n"
        "  (5): Linear(in_features=1, out_features=1, bias=True)\n"
        ")")
    assert repr(nn.ModuleList()) == "ModuleList()"


def test_module_dict():
    d = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(1, 2)})
    assert list(d) == ["a", "b"] and "a" in d and len(d) == 2
    assert repr(d) == "ModuleDict(\n  (a): ReLU()\n  (b): Linear(in_features=1, out_features=2, bias=True)\n)"
    d["c"] = nn.Tanh()
    d.update([("e", nn.SiLU())])
    assert list(d.keys()) == ["a", "b", "c", "e"]
    assert isinstance(d.pop("a"), nn.ReLU) and "a" not in d
    assert [k for k, _ in d.items()] == ["b", "c", "e"] and len(list(d.values())) == 3
    with pytest.raises(KeyError, match="'zz'"):
        d["zz"]
    d.clear()
    assert len(d) == 0


def test_parameter_list():
    plist = nn.ParameterList([jt.ones(2), Parameter(jt.ones(2, 3, dtype=jt.float64))])
    assert all(isinstance(p, Parameter) for p in plist) and len(plist) == 2
    assert [n for n, _ in plist.named_parameters()] == ["0", "1"]
    plist.append(jt.zeros(1))
    assert plist[-1].shape == (1,)
    assert repr(nn.ParameterList([Parameter(jt.ones(2)), Parameter(jt.ones(2, 3, dtype=jt.float64))])) == (
        "ParameterList(\n"
        "    (0): Parameter containing: [jitorch.float32 of size 2]\n"
        "    (1): Parameter containing: [jitorch.float64 of size 2x3]\n"
        ")")


def test_parameter_dict():
    pdict = nn.ParameterDict({"a": jt.ones(2)})
    pdict["b"] = Parameter(jt.zeros(3))
    assert list(pdict) == ["a", "b"] and isinstance(pdict["a"], Parameter) and "b" in pdict
    assert [n for n, _ in pdict.named_parameters()] == ["a", "b"]
    assert isinstance(pdict.pop("a"), Parameter) and list(pdict.keys()) == ["b"]
    assert repr(nn.ParameterDict({"a": Parameter(jt.ones(2))})) == (
        "ParameterDict(  (a): Parameter containing: [jitorch.FloatTensor of size 2])")
