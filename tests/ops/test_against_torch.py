"""Every registered op that torch has too, run on its samples (tests/ops/samples.py) by jitorch and by torch.

torch (CPU) is the independent oracle. The arguments are rebuilt as torch tensors with the same sizes,
strides and storage offset over a copy of the same storage (tensors sharing a storage share one in torch
too); both libraries are called the same way (function, method, in-place ``op_``, ``out=`` in the result's
dtype and in another); then the results and every argument are compared: values (integers and bools
exactly, floats within a few ulps, NaNs equal), dtypes, shapes, which argument a result shares memory with,
and for such views their strides and offset. Where torch raises, jitorch must raise the same exception type
(the messages are tested per op).

Deliberate differences are in `ALLOWED` (and in docs/differences-from-torch.md); ops torch does not have
are in `NO_TORCH_COUNTERPART`. A test keeps the compared ops covering the rest of the registry.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import registry
from tests.ops.samples import VALUES_UNDEFINED, Sample, bind, method_call, samples
from tests.support import geometry, torch_forms

# Registered ops that torch has no counterpart of, neither by name nor as one call.
NO_TORCH_COUNTERPART = {
    # as_strided's backward: adds ``src`` through a (possibly overlapping) window of a copy of ``self``; an
    # internal helper, tested against NumPy in tests/ops/test_views.py
    "_as_strided_add",
}

# Ops that are torch ATen operators without a public function or method: jitorch runs them through the
# registry, torch through torch.ops.aten.
ATEN = {"alias": torch.ops.aten.alias.default, "slice": torch.ops.aten.slice.Tensor,
        "index": torch.ops.aten.index.Tensor, "_to_copy": torch.ops.aten._to_copy.default}

# Internal ops that torch spells as another call.
TORCH_SPELLING = {
    "_div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    # unique's kernel: always the three results, of which `unique` returns those asked for
    "_unique": lambda x, sorted=True, return_inverse=False, return_counts=False, dim=None: torch.unique(
        x, sorted, True, True, dim),
}


@dataclass(frozen=True)
class Allowed:
    """A deliberate difference of one op in one form: ``why``, and which differences it allows: with
    ``accepts``, jitorch running a call that torch refuses (and no other difference); else every difference
    on the samples ``when`` picks."""

    why: str
    accepts: bool = False
    when: Callable[[Sample], bool] = lambda s: True


_NO_OUT = Allowed("jitorch takes out= in every overload of an op; torch's Python binding has none in some",
                  accepts=True)
_OUT_CAST = Allowed("jitorch casts a result into an out= tensor of any dtype it can be cast to (torch's rule for "
                    "add, exp, sum...); torch refuses another dtype than the result's for these ops", accepts=True)
# (the ops whose out= torch refuses in another dtype, in some or all of their samples)
_EXACT_OUT = ("abs absolute neg negative sign sgn floor ceil trunc fix round frac bitwise_not clamp clip clamp_min "
              "clamp_max lerp where.self all any amax amin argmax argmin max.dim min.dim median.dim kthvalue topk "
              "sort norm softmax log_softmax mm bmm mv dot vdot matmul addmm baddbmm gather index_add index_select "
              "masked_select take scatter scatter.value scatter_add scatter_reduce tril triu").split()

# (op, form) -> the deliberate difference; each is in docs/differences-from-torch.md too. An allowance that
# no sample needs fails the op's test, so that the list stays true.
ALLOWED = {
    **{(name, "out_cast"): _OUT_CAST for name in _EXACT_OUT},
    # flip(x, out=), sum(x, out=) without a dim, std(x, unbiased, out=), where(c, x, number, out=)
    **{(name, form): _NO_OUT for name in ("flip", "fliplr", "flipud", "roll", "sum", "prod", "std", "var")
       for form in ("out", "out_cast")},
    ("where.self", "out"): _NO_OUT,
    **{("index_put", form): Allowed("jitorch's index_put takes None in indices (a dim taken whole), as "
                                    "torch.ops.aten.index_put does; torch.index_put refuses it", accepts=True)
       for form in ("function", "method", "inplace")},
    ("einsum", "function"): Allowed(
        "einsum returns a new tensor; torch returns a view of a single operand that it only permutes or takes a "
        "diagonal of", when=lambda s: len(s.args[1]) == 1),
    ("as_strided_scatter", "function"): Allowed(
        "as_strided_scatter reads self as a contiguous tensor; torch applies the strides to a copy in self's "
        "memory order (and supports only contiguous self under autograd)",
        when=lambda s: not s.args[0].is_contiguous()),
}

# Ops whose indices torch leaves unspecified between equal values: the indices must pick the values, and
# need not be torch's. (op -> the schema positions of dim and keepdim; None: the dim is kept.)
TIE_INDICES = {"kthvalue": (2, 3), "topk": (2, None), "median.dim": (1, 2)}

# (rtol, atol) of floating results; integers and bools are compared exactly.
TOLERANCE = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7)}
FLOAT_DTYPES = (jt.float32, jt.float64)
# out= in another dtype than the result's: the other width of the same kind, else int64
OTHER_DTYPE = {torch.float32: torch.float64, torch.float64: torch.float32, torch.int64: torch.int32}


def forms_of(op):
    """The forms both libraries call ``op`` in: those of `torch_forms` (``out=`` also in another dtype),
    else the ATen operator or the call torch spells it as."""
    if op.name in ATEN:
        return ["aten"]
    if op.name in TORCH_SPELLING:
        return ["function"]
    forms = torch_forms(op)
    return forms + ["out_cast"] * ("out" in forms)


OPS = sorted(set(registry.OPS) - NO_TORCH_COUNTERPART)


# Arguments in torch --------------------------------------------------------------------------------------

class Twin:
    """Converts a sample's arguments to torch, one torch storage per jitorch storage (a copy of it)."""

    def __init__(self):
        self.storages = []  # [(jitorch Storage, torch base tensor over its copy)]

    def tensor(self, t):
        storage = t.untyped_storage()
        base = next((b for s, b in self.storages if s is storage), None)
        if base is None:
            n = len(storage)
            base = torch.from_numpy(np.array(t.as_strided((n,), (1,), 0).numpy(), copy=True))
            self.storages.append((storage, base))
        return base.as_strided(tuple(t.shape), t.stride(), t.storage_offset())

    def value(self, v):
        if isinstance(v, jt.Tensor):
            return self.tensor(v)
        if isinstance(v, jt.dtype):
            return getattr(torch, v.name)
        if isinstance(v, jt.Generator):  # random ops compare no values (see `_values_defined`): any seed does
            return torch.Generator().manual_seed(0)
        if v is jt.contiguous_format:
            return torch.contiguous_format
        if isinstance(v, (list, tuple)):
            return type(v)(self.value(x) for x in v)
        return v

    def sample(self, s):
        return Sample(tuple(self.value(v) for v in s.args), {k: self.value(v) for k, v in s.kwargs.items()})

    def owner(self, t):
        """The position of the argument storage a result (of either library) shares memory with, or None."""
        if t.numel() == 0:
            return None
        if isinstance(t, jt.Tensor):
            storage = t.untyped_storage()
            return next((i for i, (s, _) in enumerate(self.storages) if s is storage), None)
        ptr = t.untyped_storage().data_ptr()
        return next((i for i, (_, b) in enumerate(self.storages) if b.untyped_storage().data_ptr() == ptr), None)


def _name(torch_dtype):
    return str(torch_dtype).split(".")[-1]


def out_tensors(functional, form):
    """(jitorch, torch) empty tensors for ``out=`` (resized by the call), in the dtypes of torch's
    ``functional`` result, or for "out_cast" in others."""
    results = tuple(functional) if isinstance(functional, tuple) else (functional,)
    dtypes = [OTHER_DTYPE.get(r.dtype, torch.int64) if form == "out_cast" else r.dtype for r in results]
    made = [(jt.empty(0, dtype=getattr(jt, _name(d))), torch.empty(0, dtype=d)) for d in dtypes]
    if not isinstance(functional, tuple):
        return made[0]
    return tuple(m[0] for m in made), tuple(m[1] for m in made)


# Calling ---------------------------------------------------------------------------------------------------

def call(op, form, s, library):
    """Call ``op`` in ``form`` on sample ``s`` of ``library`` (jitorch or torch): (result, None) or
    (None, the exception)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's deprecations; warnings are tested per op)
            return _call(op, form, s, library), None
    except Exception as e:  # noqa: BLE001  (the exception is what gets compared)
        return None, e


def _spread(op, args):
    """Positional arguments with a list given for ``Tensor...`` spread out (torch's only spelling of
    ``broadcast_tensors``)."""
    for i, a in enumerate(op.schema.args[:len(args)]):
        if a.varargs and a.type == "Tensor" and isinstance(args[i], (list, tuple)):
            return (*args[:i], *args[i], *args[i + 1:])
    return args


def _call(op, form, s, library):
    if form == "aten":
        return ATEN[op.name](*s.args, **s.kwargs) if library is torch else registry.call(op, bind(op, s))
    if form in ("function", "out", "out_cast"):
        if library is jt:
            fn = registry.FUNCTIONS[op.public_name]
        else:
            fn = TORCH_SPELLING.get(op.name) or getattr(torch, op.public_name)
        return fn(*_spread(op, s.args), **s.kwargs)
    x, args, kwargs = method_call(op, s)
    return getattr(x, op.method_name + "_" * (form == "inplace"))(*args, **kwargs)


# Comparing -------------------------------------------------------------------------------------------------

def _leaves(result):
    return [x for r in result for x in _leaves(r)] if isinstance(result, (tuple, list)) else [result]


def _values(t):
    return np.asarray(t.numpy()) if isinstance(t, jt.Tensor) else t.detach().numpy()


def value_difference(got, want):
    """How a tensor's values (either library's) differ from torch's ``want``, or None."""
    a, b = _values(got), _values(want)
    if want.dtype in TOLERANCE:
        rtol, atol = TOLERANCE[want.dtype]
        ok = np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = np.array_equal(a, b)
    return None if ok else f"values {a.tolist()} vs torch's {b.tolist()}"


def tensor_differences(got, want, values, twin=None, strides=False):
    """The differences of a jitorch tensor from torch's: dtype, shape, values (if ``values``), the argument
    it shares memory with (if ``twin``) and then, for views, its geometry (``strides``: in any case)."""
    if not isinstance(got, jt.Tensor):
        return [f"{type(got).__name__} where torch gives a Tensor"]
    found = []
    if got.dtype.name != _name(want.dtype):
        found.append(f"dtype {got.dtype.name} vs torch's {want.dtype}")
    if tuple(got.shape) != tuple(want.shape):
        return found + [f"shape {list(got.shape)} vs torch's {list(want.shape)}"]
    if values and not found:
        found += [d for d in [value_difference(got, want)] if d]
    if twin is not None:
        mine, theirs = twin.owner(got), twin.owner(want)
        if mine != theirs:
            found.append(f"shares memory with argument {mine}, torch's with argument {theirs}")
        strides = strides or theirs is not None
    if strides:
        g = geometry(tuple(got.shape), got.stride(), got.storage_offset())
        w = geometry(tuple(want.shape), want.stride(), want.storage_offset())
        if g != w:
            found.append(f"strides {got.stride()}+{got.storage_offset()} vs torch's "
                         f"{want.stride()}+{want.storage_offset()}")
    return found


def tie_index_difference(op, ts, indices, values):
    """Whether jitorch's ``indices`` pick torch's ``values`` out of torch's input (an op of `TIE_INDICES`)."""
    dim_at, keep_at = TIE_INDICES[op.name]
    args = bind(op, Sample(ts.args, {k: v for k, v in ts.kwargs.items() if k != "out"}))
    x, dim = args[0], args[dim_at]
    idx = torch.from_numpy(np.array(indices.numpy(), copy=True))
    if x.ndim == 0:
        picked = x.expand(idx.shape)
    elif keep_at is None or args[keep_at]:
        picked = x.gather(dim, idx)
    else:
        picked = x.gather(dim, idx.unsqueeze(dim)).squeeze(dim)
    found = value_difference(picked, values)
    return found and f"indices {indices.tolist()} pick {picked.tolist()}, not torch's {values.tolist()}"


def result_differences(op, got, want, twin, ts):
    gl, wl = _leaves(got), _leaves(want)
    if len(gl) != len(wl):
        return [f"{len(gl)} results, torch {len(wl)}"]
    values = _values_defined(op)
    found = []
    for i, (g, w) in enumerate(zip(gl, wl)):
        if not isinstance(w, torch.Tensor):
            if g != w or type(g) is not type(w):
                found.append(f"result {i}: {g!r} vs torch's {w!r}")
            continue
        ties = op.name in TIE_INDICES and i == 1
        found += [f"result {i}: {d}" for d in tensor_differences(g, w, values and not ties, twin)]
        if ties and isinstance(g, jt.Tensor) and g.shape == tuple(w.shape):
            found += [f"result {i}: {d}" for d in [tie_index_difference(op, ts, g, wl[0])] if d]
    return found


def _values_defined(op):
    # random ops draw from jitorch's own generator (no common stream with torch): their values are not
    # compared, only shapes and dtypes (and the distributions, in tests/ops/test_random.py)
    return op.kind != "random" and op.name not in VALUES_UNDEFINED


class Raises(str):
    """A difference in what is raised: jitorch's exception (or None) and torch's."""

    def __new__(cls, mine, theirs):
        text = super().__new__(cls, f"raises {type(mine).__name__}: {mine}; torch raises "
                                    f"{type(theirs).__name__}: {theirs}")
        text.accepted = mine is None  # jitorch ran what torch refused
        return text


def check_form(op, form, sample, functional=None):
    """The differences between jitorch and torch calling ``op`` in ``form`` on a copy of ``sample``.
    ``functional``: torch's functional result, whose dtypes the ``out=`` tensors take."""
    s = sample.clone()
    twin = Twin()
    ts = twin.sample(s)
    if form in ("out", "out_cast"):
        s.kwargs["out"], ts.kwargs["out"] = out_tensors(functional, form)
        twin.value(s.kwargs["out"])  # (results alias the out= tensors)
    want, t_err = call(op, form, ts, torch)
    got, j_err = call(op, form, s, jt)
    if t_err is not None or j_err is not None:
        return [] if type(t_err) is type(j_err) else [Raises(j_err, t_err)]
    found = result_differences(op, got, want, twin, ts)
    # every argument afterwards: what the call wrote (self in place, out=), and the geometry that in-place
    # view ops change; out= tensors' strides after a resize are unspecified (docs/differences-from-torch.md)
    out = _leaves(s.kwargs.get("out", ()))
    for i, (g, w) in enumerate(zip(s.tensors(), ts.tensors())):
        found += [f"argument {i} afterwards: {d}" for d in
                  tensor_differences(g, w, _values_defined(op), strides=not any(g is o for o in out))]
    if form == "inplace" and got is not method_call(op, s)[0]:
        found.append("the in-place call does not return self")
    return found


def _allowed(allowance, sample, difference):
    if allowance.accepts:
        return isinstance(difference, Raises) and difference.accepted and allowance.when(sample)
    return allowance.when(sample)


def op_differences(op):
    """Every difference on the op's samples (with floating tensors in each of `FLOAT_DTYPES`), one line each
    naming sample and form, except those `ALLOWED`; and a line for each allowance no sample needs."""
    found, used = [], set()
    for dtype in FLOAT_DTYPES:
        for k, sample in enumerate(samples(op, dtype, seed=zlib.crc32(op.name.encode()))):
            functional, _ = call(op, "function", Twin().sample(sample.clone()), torch)
            for form in forms_of(op):
                if form.startswith("out") and functional is None:
                    continue  # (torch raised, which the function form compares)
                allowance = ALLOWED.get((op.name, form))
                for d in check_form(op, form, sample, functional):
                    if allowance is not None and _allowed(allowance, sample, d):
                        used.add(form)
                    else:
                        found.append(f"{dtype.name} sample {k} {sample} {form}: {d}")
    found += [f"{form}: allowed ({a.why}) but no sample differs any more: update ALLOWED"
              for (name, form), a in ALLOWED.items() if name == op.name and form not in used]
    return found


@pytest.mark.parametrize("name", OPS)
def test_op_matches_torch(name):
    found = op_differences(registry.OPS[name])
    assert not found, f"{name} differs from torch:\n" + "\n".join(found)


def test_every_op_is_compared_or_listed():
    """Every registry op is compared with torch in some form, or listed in NO_TORCH_COUNTERPART."""
    uncovered = sorted(name for name in OPS if not forms_of(registry.OPS[name]))
    assert not uncovered, f"ops compared in no form: give them a torch call or list them: {uncovered}"
    assert NO_TORCH_COUNTERPART <= set(registry.OPS), "NO_TORCH_COUNTERPART names an op the registry lacks"
    assert {name for name, _ in ALLOWED} <= set(OPS), "ALLOWED names an op that is not compared"
