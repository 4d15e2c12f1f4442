"""Every registered op that torch has too, run on its samples (tests/ops/samples.py) by jitorch and by torch.

torch (CPU) is the independent oracle. The arguments are rebuilt as torch tensors with the same sizes,
strides and storage offset over a copy of the same storage (tensors sharing a storage share one in torch
too); both libraries are called the same way (function, method, in-place ``op_``, ``out=`` in the result's
dtype and in another), with floating tensors in float32, float64, float16 and bfloat16; then the results
and every argument are compared: values (integers and bools exactly, floats as `TOLERANCE` says, NaNs
equal), dtypes, shapes, which argument a result shares memory with, and for such views their strides and
offset. Where torch raises, jitorch must raise the same exception type
(the messages are tested per op).

Deliberate differences are in `ALLOWED` (and in docs/differences-from-torch.md); ops torch does not have
are in `NO_TORCH_COUNTERPART`. A test keeps the compared ops covering the rest of the registry.
"""

from __future__ import annotations

import functools
import warnings
import zlib
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import registry
from jitorch.ops.orthogonal_polynomials import NAMES as POLYNOMIALS
from jitorch.ops.special_ops import CEPHES
from tests.ops.samples import VALUES_UNDEFINED, Sample, bind, method_call, samples
from tests.support import geometry, torch_forms

# Registered ops that torch has no counterpart of, neither by name nor as one call.
NO_TORCH_COUNTERPART = {
    # one dim's bin edges of histogramdd (torch's _histogramdd_bin_edges gives every dim's): compared with torch
    # through histogramdd in tests/ops/test_histogramdd.py and here
    "_histogramdd_edges",
    # histogramdd's counts of the edges it made from bin counts: ``_histogramdd_from_bin_tensors``'s kernel under
    # the name torch's backward error gives them (torch's op of that name takes the counts and range)
    "_histogramdd_from_bin_cts",
    # as_strided's backward: adds ``src`` through a (possibly overlapping) window of a copy of ``self``; an
    # internal helper, tested against NumPy in tests/ops/test_views.py
    "_as_strided_add",
    # linalg_lstsq's kernel: linalg_lstsq (compared) is it with the singular values' gradient stopped, as torch's
    "_linalg_lstsq",
    # one layer of nn.RNN/LSTM/GRU and its backward (torch's fused RNN ops take flattened weight lists): compared
    # with torch through the modules in tests/nn/test_rnn.py
    "_rnn_layer", "_rnn_layer_backward",
    # fused scaled-dot-product attention and its backward: compared with torch through
    # F.scaled_dot_product_attention (values and gradients) in tests/ops/test_attention.py and
    # tests/codegen/test_attention.py
    "_attention", "_attention_backward",
    # CTC loss's per-sample losses and torch's gradient (torch's aten._ctc_loss also returns its log alpha):
    # compared with torch through F.ctc_loss in tests/nn/test_ctc_loss.py
    "_ctc_loss", "_ctc_loss_backward",
    # log_softmax's per-row max and log-sum, which the compiler's lse pass makes: ``(x - max) - log_sum`` compared
    # with torch's log_softmax in tests/ir/test_lse45.py
    "_log_softmax_stats",
    # a check of values (ops.value_checks): its errors compared with torch's through the functions that check
    # (nn.functional's losses, one_hot, linalg's failures, unused indexing ops) in tests/jit/test_value_checks.py
    "_check_values",
}

# Ops that are torch ATen operators without a public function or method: jitorch runs them through the
# registry, torch through torch.ops.aten.
ATEN = {"alias": torch.ops.aten.alias.default, "slice": torch.ops.aten.slice.Tensor,
        "index": torch.ops.aten.index.Tensor, "_to_copy": torch.ops.aten._to_copy.default,
        # the kernels behind torch.linalg's functions (jitorch.linalg calls them)
        **{name: getattr(torch.ops.aten, name).default for name in (
            "linalg_inv_ex", "linalg_solve_ex", "linalg_solve_triangular", "linalg_cholesky_ex", "linalg_lu_factor_ex",
            "linalg_qr", "linalg_householder_product", "_linalg_svd", "_linalg_eigh", "linalg_lstsq",
            "linalg_ldl_factor_ex", "linalg_ldl_solve")},
        "linalg_pinv.atol_rtol_float": torch.ops.aten.linalg_pinv.atol_rtol_float,
        # nn.functional.linear's kernel in eager code
        "linear": torch.ops.aten.linear.default}

# Internal ops that torch spells as another call.
TORCH_SPELLING = {
    # the method x.polygamma(n) as a function of the registry's argument order
    "_polygamma": lambda x, n: torch.polygamma(n, x),
    **{f"special_{name}": getattr(torch.special, name) for name in ("i0e", "i1", "i1e", "xlog1py", "zeta", "entr", "ndtr")},
    **{f"special_{name}": getattr(torch.special, name) for name in (*CEPHES, *POLYNOMIALS)},
    "_div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    # F.gelu's Phi and its derivative phi (torch's GELU kernels spell them inline)
    "_normal_cdf": torch.special.ndtr,
    "_normal_pdf": lambda x: (x * x * -0.5).exp() * 0.3989422804014327,  # 1 / sqrt(2 pi)
    # unique's kernel: always the three results, of which `unique` returns those asked for
    "_unique": lambda x, sorted=True, return_inverse=False, return_counts=False, dim=None: torch.unique(
        x, sorted, True, True, dim),
    "_unique_consecutive": lambda x, return_inverse=False, return_counts=False, dim=None: torch.unique_consecutive(
        x, True, True, dim),
    # lu_unpack's permutation matrices, of pivots alone
    "_lu_permutation": lambda pivots, m, dtype: torch.lu_unpack(
        torch.zeros(tuple(pivots.shape[:-1]) + (m, pivots.shape[-1]), dtype=dtype), pivots)[0],
}


# Tolerances of floating results (integers and bools are compared exactly), per dtype:
# - float32, float64: (rtol, atol), a few ulps: both libraries compute in the dtype, with their own math
#   libraries and summation orders.
# - float16, bfloat16: HALF_ULPS units in the last place of the half type at torch's value. torch's CPU
#   kernels compute half ops in float32 (its opmath type) and round once to the half type, and so do
#   jitorch's: the two float32 values differ by a few float32 ulps at most (math library, summation order),
#   which after the one rounding is at most one ulp of the half type, where they straddle a rounding
#   boundary. Reductions, scans, softmax and the matrix products accumulate in float32 in both libraries
#   and round once too, so the same bound holds for them: their float32 reassociation errors are relative to
#   the terms, and reach half an ulp of the half type only where the terms are thousands of times the result
#   (a cancellation no sample has). torch's kernels that round partial results to the half type instead
#   are the ``rounds_once`` allowances in `ALLOWED`.
#   A float32 ``out=`` result of a half sample whose torch values are all half values (torch computed in the
#   half type, then cast) is compared in ulps of the half type too.
TOLERANCE = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7)}
HALF_ULPS = 1
# float16 and bfloat16: (machine epsilon, smallest normal), by which `ulps_apart` measures
HALF = {torch.float16: (2.0 ** -10, 2.0 ** -14), torch.bfloat16: (2.0 ** -7, 2.0 ** -126)}
HALF_DTYPES = (jt.float16, jt.bfloat16)
FLOAT_DTYPES = (jt.float32, jt.float64, *HALF_DTYPES)
# The forms half samples are compared in (a sample without the half type is the float32 one's): methods and
# out= in the result's dtype run the function's kernels, compared on the float32 and float64 samples.
HALF_FORMS = ("function", "inplace", "out_cast", "aten")


@dataclass(frozen=True)
class Allowed:
    """A deliberate difference of one op in one form: ``why``, and which differences it allows: with
    ``accepts``, jitorch running a call that torch refuses (and no other difference); with ``rounds_once``,
    values of a half sample that differ from torch's but not from torch's on float32 copies of the half
    tensors rounded once to the result's dtype (and no other difference); else every difference on the
    samples ``when`` picks."""

    why: str
    accepts: bool = False
    rounds_once: bool = False
    when: Callable[[Sample], bool] = lambda s: True


_NO_OUT = Allowed("jitorch takes out= in every overload of an op; torch's Python binding has none in some",
                  accepts=True)
_OUT_CAST = Allowed("jitorch casts a result into an out= tensor of any dtype it can be cast to (torch's rule for "
                    "add, exp, sum...); torch refuses another dtype than the result's for these ops", accepts=True)
# (the ops whose out= torch refuses in another dtype, in some or all of their samples; the reductions, sorts,
# scans, softmax/log_softmax and diag among them, the unary ops torch builds with one dtype throughout, and
# isposinf/isneginf/signbit, whose out must be bool, raise as torch: `ops.out_dtypes`; tensordot and inner too:
# `registry._out_functional`)
_EXACT_OUT = ("clamp clip clamp_min "
              "clamp_max lerp where.self mm bmm mv dot vdot matmul addmm baddbmm gather index_add "
              "index_select masked_select take scatter scatter.value scatter_add scatter_reduce tril triu frexp "
              "heaviside nan_to_num ldexp diff searchsorted.Tensor bucketize.Tensor "
              "isin.Tensor_Tensor histc take_along_dim index_reduce renorm "
              "addmv addbmm chain_matmul matrix_power inverse slogdet lu_unpack lu_solve qr svd ormqr "
              "triangular_solve cross").split()


def _rounds_once(why):
    return Allowed(why, rounds_once=True)


def _half_sample(sample):
    return bool(sample.dtypes() & set(HALF_DTYPES))


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
    ("i0", "out_cast"): Allowed(
        "jitorch computes i0 in float64 and rounds once; into a float64 out= torch gives its float32 kernel's value",
        when=lambda s: not _half_sample(s)),
    ("einsum", "function"): Allowed(
        "einsum returns a new tensor; torch returns a view of a single operand that it only permutes or takes a "
        "diagonal of", when=lambda s: len(s.args[1]) == 1),
    # torch's CPU kernels that keep partial results in the half type (rounding each), where jitorch's
    # accumulate in float32 and round once: within an ulp of torch's on float32 copies, rounded once
    **{(name, form): _rounds_once(f"{what} in float32 and rounds once; torch's CPU kernel rounds each partial "
                                  "result to the half type")
       for name, what, forms in (("nansum", "nansum sums half types over several dims", ("function",)),
                                 ("index_add", "index_add adds the sources of a repeated index of half type",
                                  ("function", "inplace")))
       for form in forms},
    **{(name, "out_cast"): Allowed(
        "std and var of half types into out= of another floating dtype compute in its dtype over every dim too; "
        "torch raises 'std_var_all: Unsupported dtype Half' there (over some dims it computes)", accepts=True,
        when=_half_sample) for name in ("std.dim", "var.dim", "std.correction", "var.correction")},
    **{(name, "function"): _rounds_once(f"{name} of a half type is computed in float32 and rounded once; torch's "
                                        "spelling (ndtr's composite, GELU's inline pdf) rounds each step")
       for name in ("_normal_cdf", "_normal_pdf")},
    ("bartlett_window", "function"): Allowed(
        "bartlett_window of a half type scales arange by its Python step as mul does (unrounded); torch's in-place "
        "mul_ rounds the step to the half type first", when=lambda s: s.kwargs.get("dtype") in HALF_DTYPES),
    **{("kron", form): Allowed("kron of a non-contiguous tensor: torch's views it and raises 'view size is not "
                               "compatible'; jitorch's reshapes it", accepts=True) for form in ("function", "method")},
    ("matrix_exp", "function"): Allowed("matrix_exp of half types computes in float32 and rounds once; torch's CPU "
                                        "kernel computes in the half type and overflows (infinities, NaNs)",
                                        when=_half_sample),
    ("geqrf", "out_cast"): Allowed("geqrf's float32 values, LAPACK's (NumPy's OpenBLAS here, torch's MKL) an ulp apart "
                                   "in places, compared at float64's tolerance when written into a float64 out=",
                                   when=lambda s: jt.float32 in s.dtypes()),
    **{("addr", form): _rounds_once("addr of half types scales and adds in float32 and rounds once; torch's CPU "
                                    "kernel rounds each step to the half type") for form in ("function", "inplace")},
    ("addr", "out_cast"): Allowed("addr of half types into a float32 out= computes in float32 and rounds once to the "
                                  "half type; torch's rounds each step", when=_half_sample),
    **{("as_strided_scatter", form): Allowed(
        "as_strided_scatter reads self as a contiguous tensor; torch applies the strides to a copy in self's "
        "memory order (and supports only contiguous self under autograd)",
        when=lambda s: not s.args[0].is_contiguous()) for form in ("function", "method")},
}

# Decompositions whose vectors are unique up to sign only (LAPACK implementations choose differently): their
# results are compared by magnitude (the decompositions themselves in tests/ops/test_decompositions.py).
UP_TO_SIGN = {"svd", "_linalg_svd", "_linalg_eigh"}


def _magnitudes(results):
    return [r.abs() if isinstance(r, (jt.Tensor, torch.Tensor)) and r.dtype.is_floating_point else r for r in results]


# Ops whose indices torch leaves unspecified between equal values: the indices must pick the values, and
# need not be torch's. (op -> the schema positions of dim and keepdim; None: the dim is kept.)
TIE_INDICES = {"kthvalue": (2, 3), "topk": (2, None), "median.dim": (1, 2)}

# out= in another dtype than the result's: the other width of the same kind, else int64
OTHER_DTYPE = {torch.float32: torch.float64, torch.float64: torch.float32, torch.int64: torch.int32,
               torch.float16: torch.float32, torch.bfloat16: torch.float32}


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


def to_torch(a):
    """A torch tensor sharing NumPy array ``a``'s memory (bfloat16, which torch.from_numpy lacks, through its
    bits)."""
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


# Arguments in torch --------------------------------------------------------------------------------------

class Twin:
    """Converts a sample's arguments to torch, one torch storage per jitorch storage (a copy of it; with
    ``widen``, half types widened to float32)."""

    def __init__(self, widen=False):
        self.storages = []  # [(jitorch Storage, torch base tensor over its copy)]
        self.widen = widen

    def tensor(self, t):
        storage = t.untyped_storage()
        base = next((b for s, b in self.storages if s is storage), None)
        if base is None:
            n = len(storage)
            base = to_torch(np.array(t.as_strided((n,), (1,), 0).numpy(), copy=True))
            if self.widen and base.dtype in HALF:
                base = base.float()
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


def out_tensors(functional, form, widen=False):
    """(jitorch, torch) empty tensors for ``out=`` (resized by the call), in the dtypes of torch's
    ``functional`` result, or for "out_cast" in others (torch's half types widened to float32 with
    ``widen``)."""
    results = tuple(functional) if isinstance(functional, tuple) else (functional,)
    dtypes = [OTHER_DTYPE.get(r.dtype, torch.int64) if form == "out_cast" else r.dtype for r in results]
    made = [(jt.empty(0, dtype=getattr(jt, _name(d))),
             torch.empty(0, dtype=torch.float32 if widen and d in HALF else d)) for d in dtypes]
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
    if isinstance(t, jt.Tensor):
        return np.asarray(t.numpy())
    if t.dtype is torch.bfloat16:
        return t.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.detach().numpy()


class ValuesDiffer(str):
    """A difference in values (of a result or an argument afterwards)."""

    def labelled(self, label):
        return ValuesDiffer(label + self)


def _label(label, difference):
    return difference.labelled(label) if isinstance(difference, ValuesDiffer) else label + difference


def value_difference(got, want, half=None):
    """How a tensor's values (either library's) differ from torch's ``want``, or None, within `TOLERANCE`.
    ``half``: the half type of the sample's floating tensors, if any."""
    a, b = _values(got), _values(want)
    dtype = half if half is not None and want.dtype in TOLERANCE and _all_of(b, half) else want.dtype
    if dtype in HALF:
        ok = bool(np.all(ulps_apart(a, b, dtype) <= HALF_ULPS))
    elif dtype in TOLERANCE:
        rtol, atol = TOLERANCE[dtype]
        ok = np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = np.array_equal(a, b)
    return None if ok else ValuesDiffer(f"values {a.tolist()} vs torch's {b.tolist()}")


def _all_of(values, half):
    """Whether every one of ``values`` is a value of half type ``half`` (NaNs included)."""
    wide = values.astype(np.float64)
    with np.errstate(over="ignore"):  # (beyond the half type's range: not one of its values)
        return np.array_equal(wide, wide.astype(getattr(jt, _name(half)).np).astype(np.float64), equal_nan=True)


def ulps_apart(a, b, dtype):
    """How many units in the last place of half type ``dtype`` (at torch's value) each of ``a`` is from torch's
    ``b``: 0 where equal (infinities and NaNs included), NaN where only one is NaN or torch's is infinite."""
    eps, tiny = HALF[dtype]
    a, b = a.astype(np.float64), b.astype(np.float64)
    ulp = eps * 2.0 ** np.floor(np.log2(np.maximum(np.abs(b), tiny)))
    with np.errstate(invalid="ignore"):
        apart = np.abs(a - b) / ulp
    return np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, apart)


def tensor_differences(got, want, values, twin=None, strides=False, half=None):
    """The differences of a jitorch tensor from torch's: dtype, shape, values (if ``values``; ``half``: see
    `value_difference`), the argument it shares memory with (if ``twin``) and then, for views, its geometry
    (``strides``: in any case)."""
    if not isinstance(got, jt.Tensor):
        return [f"{type(got).__name__} where torch gives a Tensor"]
    found = []
    if got.dtype.name != _name(want.dtype):
        found.append(f"dtype {got.dtype.name} vs torch's {want.dtype}")
    if tuple(got.shape) != tuple(want.shape):
        return found + [f"shape {list(got.shape)} vs torch's {list(want.shape)}"]
    if values and not found:
        found += [d for d in [value_difference(got, want, half)] if d]
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


def result_differences(op, got, want, twin, ts, half):
    gl, wl = _leaves(got), _leaves(want)
    if op.name in UP_TO_SIGN:
        gl, wl = _magnitudes(gl), _magnitudes(wl)
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
        found += [_label(f"result {i}: ", d) for d in tensor_differences(g, w, values and not ties, twin, half=half)]
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
    half = _half_of(sample)
    found = result_differences(op, got, want, twin, ts, half)
    # every argument afterwards: what the call wrote (self in place, out=), and the geometry that in-place
    # view ops change; out= tensors' strides after a resize are unspecified (docs/differences-from-torch.md)
    out = _leaves(s.kwargs.get("out", ()))
    for i, (g, w) in enumerate(zip(s.tensors(), ts.tensors())):
        found += [_label(f"argument {i} afterwards: ", d) for d in
                  tensor_differences(g, w, _values_defined(op), strides=not any(g is o for o in out), half=half)]
    if form == "inplace" and got is not method_call(op, s)[0]:
        found.append("the in-place call does not return self")
    return found


def _half_of(sample):
    """torch's half type of the sample's floating tensors, or None."""
    return next((getattr(torch, d.name) for d in sample.dtypes() if d in HALF_DTYPES), None)


def rounded_once_differences(op, form, sample, functional):
    """The value differences of jitorch calling ``op`` in ``form`` on a copy of ``sample`` from torch
    calling it on float32 copies of the sample's half tensors (``out=`` tensors too), torch's results and
    arguments afterwards rounded once to the dtypes of jitorch's; or [the difference in what is raised]."""
    s = sample.clone()
    ts = Twin(widen=True).sample(s)
    if form in ("out", "out_cast"):
        s.kwargs["out"], ts.kwargs["out"] = out_tensors(functional, form, widen=True)
    want, t_err = call(op, form, ts, torch)
    got, j_err = call(op, form, s, jt)
    if t_err is not None or j_err is not None:
        return [Raises(j_err, t_err)]
    pairs = [*zip(_leaves(got), _leaves(want)), *zip(s.tensors(), ts.tensors())]
    return [d for g, w in pairs if isinstance(g, jt.Tensor) and isinstance(w, torch.Tensor)
            for d in [value_difference(g, w.to(getattr(torch, g.dtype.name)))] if d]


def _allowed(allowance, sample, difference, rounded_once):
    """Whether ``allowance`` allows ``difference`` on ``sample``; ``rounded_once()`` gives the sample's
    `rounded_once_differences`."""
    if allowance.accepts:
        return isinstance(difference, Raises) and difference.accepted and allowance.when(sample)
    if allowance.rounds_once:
        return isinstance(difference, ValuesDiffer) and allowance.when(sample) and not rounded_once()
    return allowance.when(sample)


def _holds(sample, dtype):
    """Whether ``sample`` holds ``dtype``: a tensor of it, or it as an argument (``dtype=``)."""
    return dtype in sample.dtypes() or any(v is dtype for v in sample.values())


def op_differences(op):
    """Every difference on the op's samples (with floating tensors in each of `FLOAT_DTYPES`; half ones in
    `HALF_FORMS`), one line each naming sample and form, except those `ALLOWED`; and a line for each
    allowance no sample needs."""
    found, used = [], set()
    for dtype in FLOAT_DTYPES:
        forms = [f for f in forms_of(op) if dtype not in HALF_DTYPES or f in HALF_FORMS]
        for k, sample in enumerate(samples(op, dtype, seed=zlib.crc32(op.name.encode()))):
            if dtype in HALF_DTYPES and not _holds(sample, dtype):
                continue
            functional, _ = call(op, "function", Twin().sample(sample.clone()), torch)
            for form in forms:
                if form.startswith("out") and functional is None:
                    continue  # (torch raised, which the function form compares)
                allowance = ALLOWED.get((op.name, form))
                rounded_once = functools.cache(functools.partial(rounded_once_differences, op, form, sample,
                                                                 functional))
                for d in check_form(op, form, sample, functional):
                    if allowance is not None and _allowed(allowance, sample, d, rounded_once):
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
