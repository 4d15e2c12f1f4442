"""The op registry: schemas, generated variants, argument checks, out=/in-place rules, fast path."""

import inspect
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.jit.tracer import trace
from jitorch.ops import registry
from jitorch.ops.schema import parse_schema
from tests.support import ALL_DTYPES, random_array, to_numpy


def test_schema_round_trips_its_text():
    text = "sum(Tensor self, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
    s = parse_schema(text)
    assert str(s) == text
    assert [a.name for a in s.args] == ["self", "dim", "keepdim", "dtype"]
    assert s.arg("dtype").kwarg_only and s.arg("dim").optional and s.arg("dim").list


def test_schema_errors_name_the_fragment():
    with pytest.raises(ValueError, match="bad argument 'Tensr x'"):
        parse_schema("f(Tensr x) -> Tensor")


def test_generated_signature_follows_schema():
    sig = inspect.signature(jt.add)
    assert list(sig.parameters) == ["input", "other", "alpha", "out"]  # torch's names: ``self`` is ``input``
    assert sig.parameters["alpha"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "Schema: ``add(" in jt.add.__doc__


def test_every_public_op_is_documented_and_has_variants():
    for name, ops in registry.PUBLIC.items():
        for op in ops:
            assert op.doc, f"{op.name} has no doc"
            assert op.meta is not None or op.composite is not None, op.name
            if "function" in op.variants and name.startswith("special_"):  # torch.special's own
                assert getattr(jt.special, name.removeprefix("special_")) is registry.FUNCTIONS[name], name
            elif "function" in op.variants and not name.startswith("_"):
                assert hasattr(jt, name), name
            if "method" in op.variants:
                assert hasattr(jt.Tensor, op.method_name), name
            if "inplace" in op.variants:
                assert hasattr(jt.Tensor, op.method_name + "_"), name


def test_wrong_argument_type_names_op_argument_and_position():
    with pytest.raises(TypeError, match=r"add\(\): argument 'other' \(position 2\) must be Tensor, not str"):
        jt.add(jt.ones(2), "a")
    with pytest.raises(TypeError, match=r"sum\(\): argument 'keepdim' \(position 3\) must be bool, not int"):
        jt.ones(2).sum(0, 1)


def test_out_resizes_casts_and_checks():
    a = jt.ones(2, 3)
    out = jt.empty(0, dtype=jt.float64)
    r = jt.add(a, a, out=out)
    assert r is out and out.shape == (2, 3) and out.dtype is jt.float64
    np.testing.assert_array_equal(out.numpy(), 2.0)
    wrong = jt.zeros(4)
    with pytest.warns(UserWarning, match="was resized"):
        jt.add(a, a, out=wrong)
    assert wrong.shape == (2, 3)
    ints = jt.zeros(2, 3, dtype=jt.int64)
    before = ints.numpy().copy()
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        jt.add(a, a, out=ints)
    np.testing.assert_array_equal(ints.numpy(), before)


# found by the fuzzer (seed 2500144): log10(x_permuted, out=zeros(0)) left the out tensor contiguous
RESIZED_OUT_CALLS = {
    "cos": lambda L, x, o: L.cos(x, out=o),
    "add with a broadcast operand": lambda L, x, o: L.add(x, L.ones(2), out=o),
    "clamp": lambda L, x, o: L.clamp(x, 0, 1, out=o),
    "div (a composite)": lambda L, x, o: L.div(x, 2, out=o),
    "sort": lambda L, x, o: L.sort(x, 0, out=(o, L.empty(0, dtype=L.int64)))[0],
    "cumsum": lambda L, x, o: L.cumsum(x, 0, out=o),
    "softmax": lambda L, x, o: L.softmax(x, 0, out=o),
    "index_select": lambda L, x, o: L.index_select(x, 0, L.tensor([1, 0]), out=o),
}


@pytest.mark.parametrize("out_size", [0, 5, 40])
@pytest.mark.parametrize("name", sorted(RESIZED_OUT_CALLS))
def test_a_resized_out_tensor_takes_torchs_layout(name, out_size):
    """torch's TensorIterator lays a resized out= tensor out in its inputs' memory order (pointwise ops, sort),
    other ops contiguously."""
    import torch
    strides = []
    for lib in (jt, torch):
        x = lib.arange(12.0).reshape(3, 4).t()[:, 1:]  # (4, 2) with strides (1, 4), at offset 4
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the resize warning: tested above)
            r = RESIZED_OUT_CALLS[name](lib, x, lib.zeros(out_size))
        strides.append((tuple(r.shape), r.stride(), r.storage_offset()))
    assert strides[0] == strides[1]


def test_inplace_checks_shape_and_dtype_before_writing():
    x = jt.zeros(3)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        x.add_(jt.ones(2, 3))
    i = jt.zeros(3, dtype=jt.int64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i.add_(0.5)
    assert x._version == 0 and i._version == 0
    x.add_(1)
    assert x._version == 1


def test_mixed_devices_raise_before_computing():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, cpu and meta"):
        jt.add(jt.ones(2), jt.ones(2, device="meta"))


def test_cuda_tensors_say_cuda_is_unavailable():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        jt.zeros(2, device="cuda")


def test_meta_device_runs_meta_rules_only():
    m = jt.ones(2, 3, device="meta")
    r = (m * 2).sum(1)
    assert r.device == jt.device("meta") and r.shape == (2,) and r.dtype is jt.float32
    with pytest.raises(RuntimeError, match="must match"):
        m + jt.ones(4, device="meta")


def test_varargs_sizes_accept_ints_or_one_sequence():
    assert jt.zeros(2, 3).shape == jt.zeros((2, 3)).shape == jt.zeros([2, 3]).shape == (2, 3)
    x = jt.zeros(6)
    assert x.view(2, 3).shape == x.view((2, 3)).shape == (2, 3)


# Sizes beyond int64, and shapes whose element count overflows it: torch 2.13's errors, raised before
# anything runs (issue 15: a compiled sum over such an expand returned zeros). Each takes a 3-element x.
OVERFLOWING_SIZES = [
    ("expand", lambda x: x.expand(2 ** 64, 3).sum(0), TypeError,
     "expand\\(\\): argument 'size' failed to unpack the object at pos 1 with error "
     "\"Overflow when unpacking long long\""),
    ("expand of 2**63", lambda x: x.expand(2 ** 63, 3).amax(0), TypeError, "argument 'size' failed to unpack"),
    ("expanded numel", lambda x: x.expand(2 ** 63 - 1, 3).sum(0), RuntimeError,
     "numel: integer multiplication overflow"),
    ("expanded numel over three dims", lambda x: x.expand(2 ** 62, 4, 3).amax(0), RuntimeError,
     "numel: integer multiplication overflow"),
    ("view", lambda x: x.view(-1, 2 ** 64), TypeError,
     "view\\(\\): argument 'size' failed to unpack the object at pos 2"),
    ("reshape", lambda x: x.reshape(2 ** 63, 3), TypeError, "reshape\\(\\): argument 'shape' failed to unpack"),
    ("as_strided", lambda x: x.as_strided((2 ** 62, 4), (0, 0)).sum(), RuntimeError,
     "numel: integer multiplication overflow"),
    ("zeros", lambda x: x + jt.zeros(2 ** 64, 3).sum(0), TypeError, "zeros\\(\\): argument 'size' failed to unpack"),
    ("zeros numel", lambda x: x + jt.zeros(2 ** 40, 2 ** 40, 3).sum((0, 1)), RuntimeError,
     "Storage size calculation overflowed with sizes=\\[1099511627776, 1099511627776, 3\\]"),
    ("empty with a 0 dim last", lambda x: x + jt.empty(2 ** 62, 4, 0).sum(), RuntimeError,
     "Storage size calculation overflowed"),
    ("new_zeros", lambda x: x.new_zeros(2 ** 64), TypeError, "new_zeros\\(\\): argument 'size' failed to unpack"),
    ("broadcast", lambda x: (jt.ones(1, 1).expand(2 ** 32, 1) + jt.ones(1, 1).expand(1, 2 ** 32)).sum() + x,
     RuntimeError, "numel: integer multiplication overflow"),
    ("repeat", lambda x: x.repeat(2 ** 62, 4).sum(), RuntimeError, "numel: integer multiplication overflow"),
]


@pytest.mark.parametrize("name,fn,error,match", OVERFLOWING_SIZES, ids=[c[0] for c in OVERFLOWING_SIZES])
def test_sizes_overflowing_int64_raise_torchs_error(name, fn, error, match):
    with pytest.raises(error, match=match):
        fn(jt.ones(3))


def test_sizes_at_the_int64_limits_are_accepted():
    x = jt.ones(1)
    assert x.expand(2 ** 62, 1).shape == (2 ** 62, 1)
    assert jt.empty(2 ** 63 - 1, 0, device="meta").shape == (2 ** 63 - 1, 0)
    assert x.as_strided((2 ** 63 - 1,), (0,)).shape == (2 ** 63 - 1,)


def test_overloads_resolve_by_argument_types():
    assert len(registry.PUBLIC["max"]) == 3  # max, max.dim, max.other
    x = jt.tensor([[1.0, 5.0], [3.0, 2.0]])
    assert jt.max(x).item() == 5.0
    assert jt.max(x, 1).indices.tolist() == [1, 0]
    with pytest.raises(TypeError, match="received an invalid combination of arguments"):
        jt.max(x, "a")


@given(st.sampled_from(ALL_DTYPES), st.sampled_from(ALL_DTYPES), st.sampled_from([(3,), (2, 3), ()]),
       st.sampled_from(["add", "mul", "eq"]))
def test_fast_path_agrees_with_general_path(da, db, shape, name):
    rng = np.random.default_rng(1)
    a = jt.tensor(random_array(shape, da, rng), dtype=da)
    b = jt.tensor(random_array((3,) if shape else (), db, rng), dtype=db)
    op = registry.OPS[name]
    args = (a, b, 1) if name == "add" else (a, b)
    general = registry.execute(op, registry.convert_args(op, args))
    fast = op.fast(args) if op.fast else None
    got = getattr(jt, name)(a, b)
    assert got.dtype is general.dtype and got.shape == general.shape
    np.testing.assert_array_equal(to_numpy(got), to_numpy(general))
    if fast is not None:
        assert fast.dtype is general.dtype


def test_scalar_operands_take_torch_promotion():
    assert (jt.tensor([1, 2], dtype=jt.int32) + 2.5).dtype is jt.float32
    assert (jt.tensor([250], dtype=jt.uint8) + 10).tolist() == [4]
    assert (jt.tensor([1.0], dtype=jt.float16) * 3).dtype is jt.float16


def test_kernel_results_never_alias_inputs():
    x = jt.ones(4)
    for r in (x + 0, x * 1, jt.exp(x), x.sum()):
        assert r.untyped_storage() is not x.untyped_storage()


def test_floating_point_errors_neither_warn_nor_raise():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jt.exp(jt.tensor([1000.0])).tolist() == [float("inf")]
        assert jt.exp(jt.tensor([1000.0], dtype=jt.float16)).tolist() == [float("inf")]
        assert np.isnan((jt.tensor([float("inf")]) - float("inf")).item())


def test_writes_into_self_overlapping_tensors_raise():
    x = jt.zeros(1).expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        jt.add(jt.ones(3), 1, out=x)
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_out_of_a_bool_result_is_allowed_for_inputs_that_require_grad():
    """Found by the fuzzer: ``lt(x, 0, out=o)`` with ``x`` requiring grad raised; torch refuses out= only for
    results that would carry a gradient."""
    x = jt.tensor([1.0, -2.0], requires_grad=True)
    o = jt.empty(2, dtype=jt.bool)
    jt.lt(x, 0, out=o)
    assert o.tolist() == [False, True]
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        jt.floor(x, out=jt.empty(2))


@pytest.mark.parametrize("lib", [torch, jt], ids=["torch", "jitorch"])
def test_out_that_requires_grad_is_refused_for_an_integer_result_of_a_differentiable_op(lib):
    """``add`` of integers into a float out= leaf that requires grad wrote into it (the rule looked only at
    the result's dtype); torch's guard is the op's: comparisons and ``argmax`` have none."""
    leaf = lib.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"add\(\): functions with out=\.\.\. arguments don't support"):
        lib.add(lib.arange(3), 1, out=leaf)
    assert leaf.tolist() == [0.0, 0.0, 0.0]
    lib.gt(lib.arange(3), 0, out=leaf)
    assert leaf.tolist() == [0.0, 1.0, 1.0]
    lib.argmax(lib.ones(2, 3, requires_grad=True), 1, out=lib.zeros(2, dtype=lib.int64))


OUT_GUARDS = {  # out= calls whose autograd torch serves otherwise than by the out= guard of the op's own name
    "quantile": lambda T, x, o: T.quantile(x, 0.5, out=o),  # its result copy_-ed into out
    "nanquantile by a tensor q": lambda T, x, o: T.nanquantile(x, T.tensor([0.25, 0.5]), out=o),
    "tensordot": lambda T, x, o: T.tensordot(x, x, dims=1, out=o),
    "matrix_power 1": lambda T, x, o: T.matrix_power(x.reshape(2, 2), 1, out=o),
    "diag of a vector": lambda T, x, o: T.diag(x, out=o),  # diag_embed's, served by the autograd fallback
    "diag of a matrix": lambda T, x, o: T.diag(x.reshape(2, 2), out=o),  # diagonal_copy's
    "histc": lambda T, x, o: T.histc(x, 3, out=o),  # declared nondifferentiable: no guard
    "bucketize": lambda T, x, o: T.bucketize(x, x.detach(), out=o.long()),
    "divide (div)": lambda T, x, o: T.divide(x, 2, out=o),
    "negative (neg)": lambda T, x, o: T.negative(x, out=o),
    "vstack (cat)": lambda T, x, o: T.vstack([x, x], out=o),
    "sgn": lambda T, x, o: T.sgn(x, out=o),
}


def _outcome(lib, name, x_grad, out_grad):
    x = lib.tensor([1.0, 3.0, 2.0, 4.0], requires_grad=x_grad)
    o = lib.empty(0, requires_grad=out_grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = OUT_GUARDS[name](lib, x, o)
        except RuntimeError as e:
            return f"RuntimeError: {e}"
    if not r.requires_grad:
        return ("no history", r.tolist())
    try:
        r.sum().backward()
    except RuntimeError as e:
        return ("history", r.tolist(), f"backward: {e}")
    return ("history", r.tolist(), None if x.grad is None else x.grad.tolist())


@pytest.mark.parametrize("name", sorted(OUT_GUARDS))
@pytest.mark.parametrize("x_grad, out_grad", [(True, False), (False, True), (True, True)])
def test_out_calls_with_grad_raise_or_record_as_torch(name, x_grad, out_grad):
    """quantile(out=) and diag(out=) refused inputs that require grad with the op's own name: torch copies
    quantile's result into out (its gradient flows; a leaf out that requires grad is refused by copy_) and
    serves diag by diag_embed's or diagonal_copy's out= form (its autograd fallback: a result whose backward
    raises); a guard's error names the op torch's out= form is (``divide``: div)."""
    assert _outcome(jt, name, x_grad, out_grad) == _outcome(torch, name, x_grad, out_grad)


@pytest.mark.parametrize("lib", [torch, jt], ids=["torch", "jitorch"])
def test_histogram_refuses_out_tensors_that_require_grad_by_the_autograd_fallbacks_guard(lib):
    with pytest.raises(RuntimeError, match=r"^aten::histogram\(\): functions with out=\.\.\. arguments don't"):
        lib.histogram(lib.tensor([1.0, 3.0]), 3, out=(lib.empty(0, requires_grad=True), lib.empty(0)))


def test_out_of_a_composite_op_is_traced():
    """Found by the fuzzer: ``min(a, b, out=o)`` (a composite overload) inside a compiled function wrote
    into the tracer's stand-in for ``o``: the graph returned ``o``'s old zeros."""
    t = jt.tensor([[3]])

    def f(x):
        o = jt.zeros((1, 2))
        jt.min(t, x, out=o)
        return o
    x = jt.tensor([1.0, 5.0])
    compiled = jt.compile(f)
    assert compiled(x).tolist() == f(x).tolist() == [[1.0, 3.0]]
    assert "minimum" in str(compiled.lower(x).graph)


def test_operators_take_the_ops_fast_path_but_step_aside_for_autocast_and_tracing():
    x, y = jt.ones(2, 2), jt.full((2, 2), 2.0)
    assert registry.operator_fast_path(jt.add) is registry.OPS["add"].fast
    assert registry.operator_fast_path(jt.max) is None  # overloads resolve first
    assert (x.add(y, alpha=2) - (x + 2 * y)).abs().max().item() == 0  # x + y: add's fast path at alpha's default
    assert (x + y).tolist() == [[3.0, 3.0]] * 2 and (1 - y).tolist() == [[-1.0, -1.0]] * 2
    with jt.autocast("cpu", dtype=jt.bfloat16):
        assert (x @ y).dtype is jt.bfloat16 and (x + y).dtype is jt.float32
    graph = trace(lambda a, b: a * b + a, x, y)  # the tracer's dispatch hook sees the operators' ops
    assert [n.op.name for n in graph.nodes] == ["mul", "add"]


def test_an_out_tensor_that_is_an_input_is_not_resized_as_torchs():
    """Found comparing with torch (stop 35): ``add(x, y, out=x)`` with a broadcast shape larger than ``x``'s resized
    ``x`` (torch's TensorIterator resizes no output that is also an input: it raises as ``x.add_(y)``, whose message
    had a ``(in add_)`` torch's has not); an out that is a view of an input, or a reduction's, is resized."""
    import torch

    def program(T):
        out = []
        for fn in (lambda x, b: T.add(x, b, out=x), lambda x, b: T.mul(b, x, out=x), lambda x, b: x.add_(b),
                   lambda x, b: T.where(x > 0, x, b, out=x), lambda x, b: T.clamp(x, b, out=x),
                   lambda x, b: T.add(x, b, out=x.view(12).view(3, 4)), lambda x, b: T.sum(x, 0, out=x)):
            x, b = T.ones(3, 4), -T.ones(3, 1, 4)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out.append(tuple(fn(x, b).shape) + tuple(x.shape))
            except RuntimeError as e:
                out.append(str(e))
        return out
    want = program(torch)
    assert program(jt) == want
    assert want[0] == "output with shape [3, 4] doesn't match the broadcast shape [3, 3, 4]"
