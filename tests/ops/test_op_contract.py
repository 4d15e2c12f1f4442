"""Registry-wide contracts, checked for every op on its samples (tests/ops/samples.py).

* coverage: every registered op has samples;
* the meta rule agrees with eager execution (output count, shapes, dtypes);
* functional calls leave their inputs alone, and only views alias their input;
* the generated variants (function, method, ``out=``, in-place) agree with
  ``registry.call``.

Both sides of each comparison run the same kernels, so values must agree
exactly (floats to a few ulps); random ops draw from identical generators.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import jitorch as jt
from jitorch.ops import registry
from tests.ops.samples import SAMPLES, VALUES_UNDEFINED, bind, method_call, missing_ops, samples, unknown_ops
from tests.support import flat_results, to_numpy

# A sample that warns (a deprecated or degenerate input) is a bad sample.
pytestmark = pytest.mark.filterwarnings("error")

OPS = sorted(registry.OPS)


def ops_with(predicate):
    """The ops a contract applies to (parametrising over just those, rather than skipping the rest)."""
    return [name for name in OPS if predicate(registry.OPS[name])]


# Composites whose output size depends on the data, whose meta run must refuse as torch's meta tensors do.
# (quantile's check of a tensor q reads no values on meta, as torch's: `value_checks.check`)
DATA_DEPENDENT_COMPOSITES = {"nonzero", "unique", "unique_consecutive", "combinations", "cov", "corrcoef",
                             "tensor_split.tensor_indices_or_sections", "where", "repeat_interleave.self_Tensor"}

_ULPS = {jt.float16: 1e-3, jt.bfloat16: 8e-3, jt.float32: 1e-6, jt.float64: 1e-13}


def cases(name):
    """The samples of op ``name``, seeded by its name so each test sees the same ones."""
    if name not in SAMPLES:
        pytest.fail(f"{name} has no samples in tests/ops/samples.py")
    return samples(name, seed=zlib.crc32(name.encode()))


outputs = flat_results


def assert_same(got, expected, what, values=True):
    """Same count, shapes and dtypes, and (unless ``values`` is False) the same values."""
    got, expected = outputs(got), outputs(expected)
    assert len(got) == len(expected), f"{what}: {len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        if not isinstance(e, jt.Tensor):
            assert g == e, f"{what}: output {i} is {g!r}, expected {e!r}"
            continue
        assert isinstance(g, jt.Tensor), f"{what}: output {i} is {type(g).__name__}, expected a Tensor"
        assert g.shape == e.shape, f"{what}: output {i} has shape {list(g.shape)}, expected {list(e.shape)}"
        assert g.dtype is e.dtype, f"{what}: output {i} has dtype {g.dtype}, expected {e.dtype}"
        if values:
            a, b = to_numpy(g), to_numpy(e)
            if e.dtype.is_floating_point:
                tol = _ULPS[e.dtype]
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True, err_msg=f"{what}: output {i}")
            else:
                np.testing.assert_array_equal(a, b, err_msg=f"{what}: output {i}")


def run(op, sample):
    """``registry.call`` on a copy of the sample (fresh tensors, generators in their initial state)."""
    return registry.call(op, bind(op, sample.clone()))


# Coverage -----------------------------------------------------------------------------------

def test_every_op_has_samples():
    assert not missing_ops(), f"ops without samples: add them to tests/ops/samples.py: {missing_ops()}"
    assert not unknown_ops(), f"samples for ops the registry does not have: {unknown_ops()}"


@pytest.mark.parametrize("name", OPS)
def test_samples_are_valid_and_varied(name):
    """2+ samples whose arguments bind to the schema; a dtype= request reaches the floating tensors."""
    op = registry.OPS[name]
    found = cases(name)
    assert len(found) >= 2, f"{name}: only {len(found)} sample(s)"
    for s in found:
        bind(op, s)
    wide = SAMPLES[name](np.random.default_rng(0), jt.float64)
    assert not any(t.dtype is jt.float32 for s in wide for t in s.tensors()), f"{name}: float32 despite dtype="


# Meta rule == eager ---------------------------------------------------------------------------

def meta_args(op, sample):
    """The bound arguments on the meta device: tensors keep their geometry; Device arguments become meta."""
    args = list(bind(op, sample.to_meta()))
    for i, a in enumerate(op.schema.args):
        if a.type == "Device":
            args[i] = "meta"
    return args


def _specs(spec):
    if isinstance(spec, (tuple, list)):
        return [s for part in spec for s in _specs(part)]
    return [spec]


def _assert_spec_matches(what, specs, eager):
    assert len(specs) == len(eager), f"{what}: meta rule gives {len(specs)} outputs, eager {len(eager)}"
    for i, (s, e) in enumerate(zip(specs, eager)):
        assert len(s.shape) == e.ndim and all(n is None or n == m for n, m in zip(s.shape, e.shape)), \
            f"{what}: output {i}: meta shape {s.shape}, eager {tuple(e.shape)}"
        assert s.dtype is e.dtype, f"{what}: output {i}: meta dtype {s.dtype}, eager {e.dtype}"


# A Python value computed from the data (``equal``, ``allclose``) has no meta form.
@pytest.mark.parametrize("name", ops_with(lambda op: op.schema.returns[0].type in ("Tensor", "Any")))
def test_meta_matches_eager(name):
    op = registry.OPS[name]
    for i, s in enumerate(cases(name)):
        what = f"{name} sample {i} {s}"
        eager = outputs(run(op, s))
        args = meta_args(op, s)
        data_dependent = name in DATA_DEPENDENT_COMPOSITES
        if op.composite is None:
            specs = _specs(op.meta(*registry.convert_args(op, args)))
            _assert_spec_matches(what, specs, eager)
            data_dependent = any(n is None for sp in specs for n in sp.shape)
        if data_dependent:
            # torch's meta tensors refuse ops whose output size depends on the data
            with pytest.raises(NotImplementedError):
                registry.call(op, args)
            continue
        meta = outputs(registry.call(op, args))
        assert_same(meta, eager, what + " on meta", values=False)
        assert all(m.device.type == "meta" for m in meta), f"{what}: meta run left the meta device"
        if op.view is not None:
            for m, e in zip(meta, eager):
                assert (m.stride(), m.storage_offset()) == (e.stride(), e.storage_offset()), \
                    f"{what}: view geometry on meta {m.stride()}+{m.storage_offset()}, " \
                    f"eager {e.stride()}+{e.storage_offset()}"


# Inputs untouched, aliasing ---------------------------------------------------------------------

def _snapshot(tensors):
    return [(t._version, t.untyped_storage().data.tobytes()) for t in tensors]


@pytest.mark.parametrize("name", OPS)
def test_functional_call_leaves_inputs_alone(name):
    """Inputs keep their values and versions; outputs alias an input only for views (always their first)."""
    op = registry.OPS[name]
    for i, s in enumerate(cases(name)):
        what = f"{name} sample {i} {s}"
        inputs = s.tensors()
        before = _snapshot(inputs)
        result = registry.call(op, bind(op, s))
        assert _snapshot(inputs) == before, f"{what}: an input changed"
        outs = [o for o in outputs(result) if isinstance(o, jt.Tensor)]
        if op.view is not None:
            base = s.args[0].untyped_storage()
            assert all(o.untyped_storage() is base for o in outs), f"{what}: a view does not share its input's storage"
        elif op.composite is None:  # a composite may return a view (reshape) or its input (contiguous)
            for o in outs:
                for t in inputs:
                    assert not np.shares_memory(o.untyped_storage().data, t.untyped_storage().data), \
                        f"{what}: the output shares memory with an input"


# Generated variants ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ops_with(lambda op: {"function", "method"} & op.variants))
def test_function_and_method_match_registry(name):
    op = registry.OPS[name]
    forms = [f for f in ("function", "method") if f in op.variants]
    values = name not in VALUES_UNDEFINED
    for i, s in enumerate(cases(name)):
        expected = run(op, s)
        if "function" in forms:
            c = s.clone()
            got = registry.FUNCTIONS[op.public_name](*c.args, **c.kwargs)
            assert_same(got, expected, f"{name} sample {i} {s}: jitorch.{op.public_name}", values)
        if "method" in forms:
            x, args, kwargs = method_call(op, s.clone())
            got = getattr(x, op.method_name)(*args, **kwargs)
            assert_same(got, expected, f"{name} sample {i} {s}: Tensor.{op.method_name}", values)


@pytest.mark.parametrize("name", ops_with(lambda op: "out" in op.variants))
def test_out_variant(name):
    op = registry.OPS[name]
    for i, s in enumerate(cases(name)):
        what = f"{name} sample {i} {s}: out="
        expected = run(op, s)
        outs = [jt.empty(e.shape, dtype=e.dtype) for e in outputs(expected)]
        out = tuple(outs) if isinstance(expected, tuple) else outs[0]
        c = s.clone()
        got = registry.FUNCTIONS[op.public_name](*c.args, **c.kwargs, out=out)
        assert all(g is o for g, o in zip(outputs(got), outs)), f"{what} did not return the out tensor(s)"
        assert_same(outs, expected, what, name not in VALUES_UNDEFINED)


def _fits(op, sample, result, target):
    """Whether an in-place op may write ``result`` into ``target`` (torch's shape and cast rules; a ``dtype=``
    argument must name the target's dtype; the op's own check of in-place calls, as float_power_'s float64)."""
    requested = None if op.dtype_index is None else bind(op, sample)[op.dtype_index]
    inplace_check = op.attrs.get("inplace_check")
    try:
        if inplace_check is not None:
            inplace_check(*bind(op, sample))
    except RuntimeError:
        return False
    return (result.shape == target.shape and jt.can_cast(result.dtype, target.dtype)
            and requested in (None, target.dtype))


@pytest.mark.parametrize("name", ops_with(lambda op: "inplace" in op.variants))
def test_inplace_variant(name):
    op = registry.OPS[name]
    for i, s in enumerate(cases(name)):
        what = f"{name} sample {i} {s}: {op.method_name}_"
        expected = run(op, s)
        x, args, kwargs = method_call(op, s.clone())
        method = getattr(x, op.method_name + "_")
        if op.view is not None:  # an in-place view op retargets the tensor
            assert method(*args, **kwargs) is x, f"{what} did not return self"
            assert (x.shape, x.stride(), x.storage_offset()) == \
                (expected.shape, expected.stride(), expected.storage_offset()), f"{what}: geometry"
            continue
        version, data = x._version, x.untyped_storage().data.tobytes()
        if not _fits(op, s, expected, x):
            with pytest.raises(RuntimeError):
                method(*args, **kwargs)
            assert (x._version, x.untyped_storage().data.tobytes()) == (version, data), f"{what} wrote before raising"
            continue
        assert method(*args, **kwargs) is x, f"{what} did not return self"
        assert x._version > version, f"{what} did not bump the version counter"
        assert_same(x, expected.to(x.dtype), what, name not in VALUES_UNDEFINED)
