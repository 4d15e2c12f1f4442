"""Schemas' Python names: torch's ``input`` for ``self``, NumPy's aliases (``axis``, ``keepdims``) and varargs
int lists, as every generated variant takes them, against torch."""

import inspect

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import registry
from jitorch.ops.schema import parse_schema

SUM = parse_schema("sum(Tensor self, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor")


def test_function_form_calls_self_input_and_methods_bind_it():
    assert SUM.python_names(method=False) == ("input", "dim", "keepdim", "dtype")
    assert SUM.python_names(method=True) == ("self", "dim", "keepdim", "dtype")


def test_dim_and_keepdim_have_numpys_names():
    assert SUM.aliases(method=False) == SUM.aliases(method=True) == ((1, "axis"), (2, "keepdims"))


def test_an_alias_naming_another_argument_is_not_one():
    s = parse_schema("f(Tensor self, int dim, int axis) -> Tensor")
    assert s.aliases(method=True) == ()


def test_only_a_lone_positional_int_list_spreads():
    assert parse_schema("flip(Tensor self, int[] dims) -> Tensor").spread_list(method=True) == 1
    assert parse_schema("flip(Tensor self, int[] dims) -> Tensor").spread_list(method=False) is None
    assert SUM.spread_list(method=True) is None
    optional = parse_schema("squeeze(Tensor self, int[]? dim=None) -> Tensor")
    assert optional.spread_list(method=True) is None
    assert optional.spread_list(method=True, optional=True) == 1


def _both(expr):
    """``expr`` evaluated with torch and with jitorch on the same 1x2x3 tensor ``x``: (result, result)."""
    out = []
    for mod in (torch, jt):
        x = mod.arange(6.0).reshape(1, 2, 3)
        out.append(eval(expr, {"torch": mod, "x": x}))
    return out


@pytest.mark.parametrize("expr", [
    "torch.sum(x, axis=0)", "x.sum(axis=(0, 2), keepdims=True)", "torch.mean(x, axis=[1], keepdims=True)",
    "torch.sum(input=x)", "torch.amax(x, axis=2)", "x.cumsum(axis=1)", "x.softmax(axis=2)",
    "torch.log_softmax(x, axis=2)", "x.argmax(axis=1, keepdims=True)", "x.std(axis=1, keepdims=True)",
    "torch.cat([x, x], axis=1)", "torch.stack([x, x], axis=1)", "x.unsqueeze(axis=0)",
    "torch.gather(x, axis=2, index=torch.zeros(1, 2, 1, dtype=torch.long))", "torch.max(x, 1, keepdims=True)[0]", "torch.all(x, axis=1)", "torch.amax(x, None)", "torch.amin(x, None, True)",
    "x.flip(0, 2)", "x.flip((0, 1))", "x.flip([1])", "x.tile(2, 1)", "x.squeeze(0, 1)", "x.count_nonzero(1, 2)",
    "torch.count_nonzero(x, (1, 2))",
])
def test_numpy_names_and_dim_forms_match_torch(expr):
    expected, got = _both(expr)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
    assert str(got.dtype).split(".")[1] == str(expected.dtype).split(".")[1]


def _error(expr):
    x = jt.arange(6.0).reshape(1, 2, 3)
    with pytest.raises(TypeError) as info:
        eval(expr, {"torch": jt, "x": x})
    return str(info.value)


@pytest.mark.parametrize("expr, alias", [
    ("torch.sum(x, dim=0, axis=0)", "axis"), ("torch.sum(x, 0, axis=0)", "axis"),
    ("x.cumsum(0, axis=0)", "axis"), ("x.sum(0, keepdim=True, keepdims=True)", "keepdims"),
    ("torch.softmax(x, 0, axis=0)", "axis"),
])
def test_a_name_and_its_alias_both_given_is_torchs_type_error(expr, alias):
    assert _error(expr) == f"{expr.split('(')[0].split('.')[-1]}() got an unexpected keyword argument '{alias}'"
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{alias}'"):
        eval(expr, {"torch": torch, "x": torch.arange(6.0).reshape(1, 2, 3)})


def test_missing_arguments_are_named():
    assert _error("torch.add(x)") == "add() missing 1 required positional argument: 'other'"
    assert _error("torch.gather(x)") == "gather() missing 2 required positional arguments: 'dim' and 'index'"
    assert _error("x.softmax()") == "softmax() missing 1 required positional argument: 'dim'"
    assert _error("x.flip()") == "flip() missing 1 required positional argument: 'dims'"


def test_an_extra_positional_argument_never_lands_on_an_alias():
    assert "positional arguments but 4 were given" in _error("x.sum(None, False, 1)")
    with pytest.raises(TypeError, match="positional arguments but 3 were given"):  # torch does not count self
        torch.arange(6.0).sum(None, False, 1)


def test_a_varargs_list_given_twice_is_refused():
    assert _error("x.flip(0, dims=(1,))") == "flip() got multiple values for argument 'dims'"


def test_public_signature_hides_the_aliases():
    sig = inspect.signature(jt.sum)
    assert list(sig.parameters) == ["input", "dim", "keepdim", "dtype", "out"]
    assert sig.parameters["input"].default is inspect.Parameter.empty
    assert list(inspect.signature(jt.Tensor.gather).parameters) == ["self", "dim", "index", "sparse_grad"]
    assert inspect.signature(jt.Tensor.gather).parameters["dim"].default is inspect.Parameter.empty


def test_aliases_are_resolved_at_declaration_not_per_call():
    # a variant with aliases tests each for ABSENT; it calls the resolver only when one is given
    sig = registry._Signature(registry.OPS["sum"], "method", False)
    assert sig.prologue == [
        "    if axis is not _A or keepdims is not _A:\n"
        "        self, dim, keepdim, dtype = _resolve((self, dim, keepdim, dtype), (axis, keepdims))"]
    assert registry._Signature(registry.OPS["add"], "function", True).prologue == []
